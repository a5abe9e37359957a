// The shrinker's candidate moves and its size order (internal to harness/src/shrink.cpp).
//
// A move turns the current scenario into one candidate per index: index 0, 1, 2, ... until
// it says `end`. Each candidate is strictly smaller than the current scenario in the
// lexicographic `measure` below (the search accepts nothing else), so shrinking always
// terminates and never cycles. Moves are pure functions of the scenario: deterministic.
#pragma once

#include <string_view>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz::shrinking {

// The size of a scenario, compared lexicographically: first what makes a fixture long
// (expect rows, program tokens, ops, sequences, chunks), then the model (layers, width,
// ffn, vocab, distinct words, words out of first-use order; 0 without one), then the layout (heads,
// dims, RoPE, window, scale, dtype), the placement, the token table, and last the token values
// (non-zero values, non-integers, sum of |x|, negative values).
using Measure = std::vector<double>;
Measure measure(const Scenario& scenario);

enum class Made { end, skip, candidate };

struct Move {
  std::string_view name;
  // Writes candidate `index` of `current` to `out`; `skip` when that index does not apply,
  // `end` when there are no more indices.
  Made (*make)(const Scenario& current, int index, Scenario& out);
};

// Every move, in the order the search tries them: those that remove the most first.
const std::vector<Move>& moves();

// The moves the split lookahead tries on a split scenario (drops of ops, chunks, tokens).
const std::vector<Move>& drop_moves();

// Splits chunk `index` (all chunks in program order, then split points) in two: the
// first part stays where it was, the second follows it as an append of the same sequence.
// Never smaller by itself; the search only keeps it when a drop then makes it smaller.
Made split_chunk(const Scenario& current, int index, Scenario& out);

// The token table as explicit values (what the engine and reference see: rounded to the
// layout's dtype).
std::vector<ExplicitToken> materialise(const Scenario& scenario);

}  // namespace kvfuzz::shrinking
