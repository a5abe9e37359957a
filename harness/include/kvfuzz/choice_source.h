// The small interface every generator is written against: "pick an integer in a range".
// A PRNG drives it for `kvfuzz check`, RapidCheck (properties/rc_choice_source.h) and
// libFuzzer (fuzzers/fuzz_choices.h) drive the same generator, so there is one generator
// and no second copy to drift.
//
// Simple at lo: every choice puts its simplest outcome at its low end. The shrinking
// drivers move choices toward lo, so a smaller choice gives a simpler scenario and all
// choices at lo give the simplest scenario of all. The helpers below keep the rule: each
// one's outcome at the low end of its choice is its simplest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "kvfuzz/prng.h"

namespace kvfuzz {

class ChoiceSource {
 public:
  virtual ~ChoiceSource() = default;
  // An integer in [lo, hi], lo <= hi; lo is the simplest (see above).
  virtual int64_t pick(int64_t lo, int64_t hi) = 0;

  int pick_int(int lo, int hi) { return static_cast<int>(pick(lo, hi)); }
  bool pick_bool() { return pick(0, 1) == 1; }
  // One element of a non-empty array or vector; the first is the simplest.
  template <typename Container>
  const auto& pick_from(const Container& options) {
    return options[static_cast<size_t>(pick(0, static_cast<int64_t>(options.size()) - 1))];
  }
};

// ---- Choice helpers. ----

// True about once in n, at the high end of pick(0, n - 1) only; n <= 0: false, no choice.
inline bool rarely(ChoiceSource& c, int n) {
  return n > 0 && c.pick(0, n - 1) == n - 1;
}

// A kind and its weight for pick_weighted.
template <typename Kind>
struct Weighted {
  Kind kind;
  int weight = 1;
};

// A kind with probability weight / (sum of weights), from one pick(0, sum - 1): the first
// listed at the low end. Weights >= 0, at least one > 0. Spelled
// pick_weighted<Kind>(c, {{Kind::a, 3}, {Kind::b, 1}}).
template <typename Kind>
Kind pick_weighted(ChoiceSource& c, std::initializer_list<Weighted<Kind>> kinds) {
  int sum = 0;
  for (const Weighted<Kind>& k : kinds) sum += k.weight;
  int r = c.pick_int(0, sum - 1);
  for (const Weighted<Kind>& k : kinds) {
    if (r < k.weight) return k.kind;
    r -= k.weight;
  }
  throw std::invalid_argument("pick_weighted: the weights must sum to at least 1");
}

// 0, 1, -1, 2, -2, ... for n = 0, 1, 2, 3, 4, ...: the integer nearest 0 at the low end.
inline int zigzag(int64_t n) {
  return static_cast<int>(n % 2 == 1 ? (n + 1) / 2 : -(n / 2));
}

// An offset from an edge, from one pick(0, 2): on it (0), one after (+1), one before (-1).
inline int pick_offset(ChoiceSource& c) {
  return zigzag(c.pick(0, 2));
}

// The candidate paired with `kind`, for a generator that draws every candidate first and
// then keeps one (so the number of choices does not depend on the kind).
template <typename Kind, typename T = int>
T select(Kind kind, std::initializer_list<std::pair<Kind, T>> candidates) {
  for (const auto& [candidate_kind, value] : candidates) {
    if (candidate_kind == kind) return value;
  }
  throw std::invalid_argument("select: no candidate for the kind");
}

// Choices from the project's PRNG: the same seed gives the same choices everywhere.
class PrngChoiceSource final : public ChoiceSource {
 public:
  explicit PrngChoiceSource(uint64_t seed) : rng_(seed) {}
  int64_t pick(int64_t lo, int64_t hi) override { return rng_.between(lo, hi); }

 private:
  Xoshiro256 rng_;
};

}  // namespace kvfuzz
