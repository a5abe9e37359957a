// Score spreads across split partitions (issue 15): scores large enough that a split
// decode's log-sum-exp merge overflows or underflows f32 when it rescales by any max but
// the largest. Moderate data (small integers, dyadic eighths, scale 1/sqrt(head_dim))
// keeps every score within a few dozen of every other, where exp(m_p - m_q) is finite
// whichever partition's max m_q the merge uses; f32's exp overflows past ln(FLT_MAX) ~ 88.7
// and reaches 0 below about -103.
//
// Now and then (one scenario in four) the largest score the token data can give,
// scale * M^2 * A^2 * head_dim (A the largest |q| or |k| of its distribution: 4, or 1 for
// uniform; M the power of two generated q and k are multiplied by, GeneratedTokens::qk_log2),
// is made 2^12, 2^14 or 2^16, and generated data gets non-zero scores. Then partitions of
// one decode row differ by hundreds or thousands in their max. Half of these spreads come
// from the scale alone (M = 1); the other half first make q and k
// as large as an unscaled dot product allows, M^2 * A^2 * head_dim <= 2^15 (so that a
// kernel summing q.k in f16, or scaling q in its storage dtype, stays in range: the spread
// is in the scores, not an overflow of the data), and the scale does the rest. Real
// kernels meet both: large activations, and scales other than 1/sqrt(head_dim).
// The decision and the bound come from the token data's seed, a choice the
// generator has drawn already, so that adding the spread shifts no choice (a scenario
// without it is the one it was before) and the layout does not depend on the program (an
// engine without truncate gets the same layout). The seed 0 (its low end) never spreads.
#pragma once

#include <cstdint>

#include "kvfuzz/generator.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct ScoreSpreadChoices {
  bool on = false;
  int bound_log2 = 12;        // the score bound when on: 2^12, 2^14 or 2^16
  bool by_magnitude = false;  // large q and k first (generated tokens), then the scale
};

// The largest unscaled |q.k| a magnitude spread allows: 2^15, within f16's range.
constexpr int kSpreadUnscaledLog2 = 15;

// From the token data's seed: off for seed 0 and three seeds in four; by magnitude in half
// of those.
ScoreSpreadChoices score_spread_from_seed(uint64_t seed);

// The spread applied to a built attention scenario (model scenarios are left alone: their
// q and k come from the weights). Keeps validate() true.
void apply_score_spread(const ScoreSpreadChoices& choices, Scenario& scenario);

// What a scenario's split decode rows see (own-context partitions of edges.partition_keys
// keys, rows of one-token chunks seeing at least edges.split_threshold keys), scores in
// double with RoPE: rows, and rows in which some partition's max exceeds the first
// partition's by more than ln(FLT_MAX) (a merge rescaled by the first max overflows), or
// in which every partition's max lies outside f32's exp range (a merge without any max
// subtraction overflows or underflows).
struct SplitSpreadCounts {
  int64_t split_rows = 0;
  int64_t first_max_overflows = 0;
  int64_t unshifted_out_of_range = 0;
};
SplitSpreadCounts count_split_spreads(const Scenario& scenario, const EngineEdges& edges);

}  // namespace kvfuzz
