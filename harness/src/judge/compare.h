// The comparator: pairs engine rows with reference rows by key and names the first
// divergence in program order.
#pragma once

#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/verdict.h"

namespace kvfuzz {

// `output`: the dtype the engine declares its rows rounded to (tolerance.h, accepted_error).
Verdict compare(const std::vector<ExpectedSlot>& slots, const ReferenceMap& reference,
                const EngineRun& run, int q_heads, int value_dim, DType output = DType::f32);

}  // namespace kvfuzz
