// The oracle: full-prefix attention in double precision from the logical token stream of
// one (sequence, epoch). It never sees chunks, pages or batches. It is deliberately the
// dumbest correct code in the project.
#pragma once

#include <vector>

#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {

// The token ids one (sequence, epoch) held, in order: position p holds tokens[p]. The first
// `first_row` of them were inherited (kept by a truncate, shared by a fork): they are keys
// for every row but have no rows of their own in this epoch.
struct LogicalStream {
  int seq = 0;
  int epoch = 0;
  std::vector<int> tokens;
  int64_t first_row = 0;
};

// Every (sequence, epoch) stream the program builds, in order of first appearance.
// Epochs with no tokens are left out.
std::vector<LogicalStream> logical_streams(const Scenario& scenario);

// One reference row per position of the stream from first_row on: causal mask, sliding window,
// GQA/MQA head mapping, RoPE at the true absolute position, softmax scale; the table is already
// rounded to the storage dtype. Each row carries its tolerance per q head.
std::vector<ReferenceRow> reference_rows(const Layout& layout, const TokenTable& table,
                                         const LogicalStream& stream);

}  // namespace kvfuzz
