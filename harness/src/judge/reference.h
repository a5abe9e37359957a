// The oracle: full-prefix attention in double precision from the logical token stream of
// one (sequence, epoch). It never sees chunks, pages or batches. It is deliberately the
// dumbest correct code in the project.
#pragma once

#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {

// LogicalStream and logical_streams() live in scenario.h (the model level uses them too).

// One reference row per position of the stream from first_row on: causal mask, sliding window,
// GQA/MQA head mapping, RoPE at the true absolute position, softmax scale; the table is already
// rounded to the storage dtype. Each row carries its tolerance per q head for an engine
// with `numerics`; rotated keys it declares cached in the storage dtype are rounded so.
//
// The blocked form (reference_blocked.cpp), which judging uses: several (row, q head) queries
// of one kv head at once, in 8-lane vectors, in a summation order fixed by the scenario alone
// (never by the CPU: every machine computes the same bits).
std::vector<ReferenceRow> reference_rows(const Layout& layout, const TokenTable& table,
                                         const LogicalStream& stream,
                                         const EngineNumerics& numerics = {});

// The plain form (reference.cpp): the same rows, one (row, q head) at a time in the obvious
// order, the dumbest correct code. The blocked form agrees with it to 1e-12 relative
// (tests/judge/test_reference_blocked.cpp).
std::vector<ReferenceRow> reference_rows_plain(const Layout& layout, const TokenTable& table,
                                               const LogicalStream& stream,
                                               const EngineNumerics& numerics = {});

}  // namespace kvfuzz
