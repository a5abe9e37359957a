// The token data and ids as the shrinker's moves and measure read them (internal to
// harness/src/shrink/).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz::shrinking {

using Values = std::vector<std::vector<double>>;  // [head][dim]

// The token table as explicit values (what the engine and reference see: rounded to the
// layout's dtype).
std::vector<ExplicitToken> materialise(const Scenario& scenario);

// The token ids the program uses, in order of first use.
std::vector<int> first_use_order(const Scenario& scenario);

// Whether the ids used (`order`, from first_use_order) are exactly 0, 1, ..., count - 1 in
// that order: nothing left to renumber or drop.
bool numbered_in_first_use_order(const std::vector<int>& order, size_t count);

// How many ids a table needs to hold every id used: the largest + 1 (at least 1).
int ids_needed(const std::vector<int>& order);

// Replaces every id of the program by new_id[id].
void renumber_ids(Scenario& scenario, const std::vector<int>& new_id);

inline bool is_integer(double x) {
  return std::trunc(x) == x;
}

// Calls f on every value of the chosen parts (q, k, v) of every token, token by token.
template <typename Tokens, typename F>
void for_each_value(Tokens& tokens, bool q, bool k, bool v, F&& f) {
  for (auto& t : tokens) {
    for (auto* values : {q ? &t.q : nullptr, k ? &t.k : nullptr, v ? &t.v : nullptr}) {
      if (!values) continue;
      for (auto& head : *values) {
        for (auto& x : head) f(x);
      }
    }
  }
}

}  // namespace kvfuzz::shrinking
