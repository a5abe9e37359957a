// What judging a run concludes: the kinds of failure, the first divergence and the
// status of every row. The comparator (judge/compare.h) and the properties produce it;
// every entry point prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/rows.h"

namespace kvfuzz {

// The runner gives every token fed to the engine exactly one row, tagged with where it
// came from (op, chunk, token). So a missing or an extra row can only mean one of two
// things: the engine returned the wrong number of rows for a chunk (engine_error, from the
// runner's shape check), or it reported a token at the wrong position, which leaves a
// missing row at the right key and an extra row at the reported one (wrong_position).
enum class FailureKind {
  engine_error,    // the engine threw, or returned a wrongly shaped chunk
  wrong_position,  // the engine reported a token at another (seq, epoch, pos) than the program's
  not_finite,      // NaN or Inf where the reference is finite
  mismatch,        // |got - expected| above the tolerance
};

std::string_view failure_kind_name(FailureKind kind);

struct Divergence {
  FailureKind kind = FailureKind::mismatch;
  RowKey key;
  RowOrigin origin;
  int q_head = 0;
  int dim = 0;
  double got = 0, expected = 0, error = 0, bound = 0;
  int64_t key_lo = 0, key_hi = 0;  // keys the row should see
  std::string detail;              // engine error text, or what the engine reported instead
};

// How one expected row fared, in slot (program) order.
enum class RowStatus {
  ok,        // every value within its bound
  unjudged,  // within its bound, but the bound is at least the largest visible |v|: the
             // scores are too large for f32 accumulation to say anything finer than "finite"
  failed,    // any failure kind
  not_run,   // after an engine error: the engine never produced it
};

struct Verdict {
  bool pass = true;
  std::optional<Divergence> first;
  int rows_compared = 0;
  int rows_failed = 0;
  int rows_unjudged = 0;
  std::vector<RowStatus> status;  // one per slot
};

}  // namespace kvfuzz
