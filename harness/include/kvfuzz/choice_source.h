// The small interface every generator is written against: "pick an integer in a range".
// A PRNG drives it for `kvfuzz check`; RapidCheck and libFuzzer will drive the same
// generators later, so there is one generator and no second copy to drift.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvfuzz/prng.h"

namespace kvfuzz {

class ChoiceSource {
 public:
  virtual ~ChoiceSource() = default;
  // An integer in [lo, hi], lo <= hi. Generators should put the "simplest" value at lo:
  // shrinking drivers move choices toward lo.
  virtual int64_t pick(int64_t lo, int64_t hi) = 0;

  int pick_int(int lo, int hi) { return static_cast<int>(pick(lo, hi)); }
  bool pick_bool() { return pick(0, 1) == 1; }
  // True with probability about 1/n.
  bool one_in(int n) { return pick(0, n - 1) == 0; }
  // One element of a non-empty array or vector; the first is the simplest.
  template <typename Container>
  const auto& pick_from(const Container& options) {
    return options[static_cast<size_t>(pick(0, static_cast<int64_t>(options.size()) - 1))];
  }
};

// Choices from the project's PRNG: the same seed gives the same choices everywhere.
class PrngChoiceSource final : public ChoiceSource {
 public:
  explicit PrngChoiceSource(uint64_t seed) : rng_(seed) {}
  int64_t pick(int64_t lo, int64_t hi) override { return rng_.between(lo, hi); }

 private:
  Xoshiro256 rng_;
};

}  // namespace kvfuzz
