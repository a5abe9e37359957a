// Rows: the output of one query token, keyed by (sequence, epoch, absolute position).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"

namespace kvfuzz {

struct RowKey {
  int seq = 0;
  int epoch = 0;
  int64_t pos = 0;
  auto operator<=>(const RowKey&) const = default;
};

std::string to_string(const RowKey& key);  // "seq 0 epoch 1 pos 4"

// Where a row came from in the program: op index and the token's index in its chunk.
struct RowOrigin {
  int op = 0;
  int chunk = 0;
  int token = 0;
};

std::string to_string(const RowOrigin& origin);  // "op 2, chunk 0, token 1"

// A row the engine produced. values[q_head * value_dim + d].
struct EngineRow {
  RowKey key;  // position as the engine reported it
  RowOrigin origin;
  std::vector<float> values;
};

// One q head's bound in its parts (harness/src/judge/tolerance.cpp's steps), for explain:
// the bound is their total(); logit_error is the delta the softmax term grows
// from.
struct BoundParts {
  double logit_error = 0;
  double softmax = 0;     // the weights moved by the logit error (steps 1, 2, 4)
  double sums = 0;        // the weighted sum and its normaliser (steps 3, 7)
  double p_rounding = 0;  // P rounded before P.V (steps 8, 11)
  double combine = 0;     // split partials combined by log-sum-exp or stored narrower (step 10)
  double total() const { return softmax + sums + p_rounding + combine; }
};

// A row of the reference, with what the comparator needs to judge it.
struct ReferenceRow {
  RowKey key;
  int64_t key_lo = 0, key_hi = 0;       // the keys this row sees: positions [key_lo, key_hi]
  std::vector<double> values;           // [q_head * value_dim + d]
  std::vector<double> bound;            // tolerance per q head
  std::vector<double> value_scale;      // per q head: the largest |v| the row sees (M)
  std::vector<BoundParts> bound_parts;  // per q head: what its bound is made of
};

// A row the program implies: its key (from the runner's own logical bookkeeping, never
// from the engine) and where in the program it is produced. In program order.
struct ExpectedSlot {
  RowKey key;
  RowOrigin origin;
};

struct EngineRun {
  std::vector<EngineRow> rows;        // in the order the engine returned them
  std::optional<std::string> error;   // the engine threw, or returned a wrongly shaped chunk
  std::optional<RowOrigin> error_at;  // op where it happened
  // A hazard a kernel checker found (EngineError::kind), which the verdict names as such.
  EngineErrorKind error_kind = EngineErrorKind::error;
};

using ReferenceMap = std::map<RowKey, ReferenceRow>;

}  // namespace kvfuzz
