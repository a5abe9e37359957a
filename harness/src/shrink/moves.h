// The shrinker's candidate moves (internal to harness/src/shrink/).
//
// A move turns the current scenario into one candidate per index: index 0, 1, 2, ... until
// it says `end`. Each candidate is strictly smaller than the current scenario in the
// measure (shrink/measure.h; the search accepts nothing else), so shrinking always
// terminates and never cycles. Moves are pure functions of the scenario: deterministic, so
// the same scenario always gives the same candidates in the same order, and that order
// decides which smaller scenario the search finds first.
#pragma once

#include <string_view>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz::shrinking {

enum class Made { end, skip, candidate };

// Writes candidate `index` of `current` to `out`; `skip` when that index does not apply,
// `end` when there are no more indices.
using MakeCandidate = Made (*)(const Scenario& current, int index, Scenario& out);

struct Move {
  std::string_view name;  // what progress lines and the per-move counts call it
  MakeCandidate make;
};

// Every move, in the order the search tries them: those that remove the most first.
const std::vector<Move>& moves();

// The moves the split lookahead tries on a split scenario (drops of ops, chunks, tokens).
const std::vector<Move>& drop_moves();

// The split lookahead's own move: split_chunk below.
const Move& split_move();

// Copies `s` for a candidate. Hand-derived expect rows never survive a change: a shrunk
// fixture has none (the reference, not `expect`, judges engines).
Scenario start_candidate(const Scenario& s);

// The program (moves_program.cpp).
Made drop_expect(const Scenario& s, int index, Scenario& out);
Made drop_sequence(const Scenario& s, int index, Scenario& out);
Made drop_ops(const Scenario& s, int index, Scenario& out);
Made drop_chunk(const Scenario& s, int index, Scenario& out);
Made drop_tokens(const Scenario& s, int index, Scenario& out);
Made merge_appends(const Scenario& s, int index, Scenario& out);
Made step_to_append(const Scenario& s, int index, Scenario& out);
Made simplify_epoch_ops(const Scenario& s, int index, Scenario& out);
// Splits chunk `index` (all chunks in program order, then split points) in two: the
// first part stays where it was, the second follows it as an append of the same sequence.
// Never smaller by itself; the search only keeps it when a drop then makes it smaller.
Made split_chunk(const Scenario& s, int index, Scenario& out);

// Cuts that keep a query's place against the engine's edges (moves_edges.cpp): several
// keys at once, where a single cut moves every later key off its slot; a later truncate
// keeps the same tokens. The split path's edges are the built-in flash engine's
// (EngineEdges' defaults).
// The last one-token chunk of each epoch that takes the split path: the keys just before
// it or the first it sees, down to exactly the split threshold; or one whole partition.
Made cut_to_split_edge(const Scenario& s, int index, Scenario& out);
// Keys inside the window of each epoch's last query, when a key lies beyond its edge:
// the window shrinks by as many, so the same keys stay on each side of the edge.
Made cut_inside_window(const Scenario& s, int index, Scenario& out);
// Runs of whole pages of an epoch's own tokens (every later token keeps its slot in its
// page), halves down to 32 parts.
Made cut_whole_pages(const Scenario& s, int index, Scenario& out);

// The model, at model level only (moves_model.cpp).
Made reduce_model_size(const Scenario& s, int index, Scenario& out);
Made reduce_vocab(const Scenario& s, int index, Scenario& out);
Made merge_vocab_ids(const Scenario& s, int index, Scenario& out);

// The layout and the placement (moves_shape.cpp).
Made reduce_heads(const Scenario& s, int index, Scenario& out);
// Each attention feature off, then one sink logit or ALiBi slope at a time to 0.
Made simplify_features(const Scenario& s, int index, Scenario& out);
Made reduce_head_dim(const Scenario& s, int index, Scenario& out);
// head_dim 1 (then 2, 4, ...) with the scores of one anchor query kept exactly
// (moves_concentrate.cpp).
Made concentrate_scores(const Scenario& s, int index, Scenario& out);
Made reduce_value_dim(const Scenario& s, int index, Scenario& out);
// head_dim and value_dim cut as one when they are equal (one head size for q, k and v).
Made reduce_head_size(const Scenario& s, int index, Scenario& out);
Made simplify_layout(const Scenario& s, int index, Scenario& out);
Made simplify_placement(const Scenario& s, int index, Scenario& out);
Made reduce_page_size(const Scenario& s, int index, Scenario& out);

// The token table and its values (moves_values.cpp).
Made compact_tokens(const Scenario& s, int index, Scenario& out);
Made merge_token_ids(const Scenario& s, int index, Scenario& out);
Made simplify_values_wholesale(const Scenario& s, int index, Scenario& out);
Made simplify_value(const Scenario& s, int index, Scenario& out);

}  // namespace kvfuzz::shrinking
