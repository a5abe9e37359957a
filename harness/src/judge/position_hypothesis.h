// A row that misses its bound by a little, with RoPE, may be a key rotated at a wrong
// position rather than rounding: a key's angle one position off moves its score, and so the
// row, by as little as a rounding step. Before the report suggests undeclared numerics
// (report.cpp's precision hint), the row is recomputed with each visible key rotated at a
// wrong position (one before, one after, at 0), and a hypothesis that explains the engine's
// row is named instead.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "kvfuzz/dtype.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {

// The engine's values of one q head of the row `ref` (got: value_dim of them) against the
// reference recomputed with one visible key rotated at a wrong position: a one-line
// explanation naming the key and the position it matches at, when that row is within the
// q head's bound (and output rounding) at every value while the reference is not; nothing
// otherwise, and nothing for layouts without RoPE or rows of more than 4096 keys.
std::optional<std::string> wrong_angle_hypothesis(const Scenario& scenario, const TokenTable& table,
                                                  const ReferenceRow& ref, int q_head,
                                                  std::span<const float> got, DType output);

}  // namespace kvfuzz
