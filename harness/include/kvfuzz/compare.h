// The comparator: pairs engine rows with reference rows by key and names the first
// divergence in program order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/rows.h"
#include "kvfuzz/runner.h"

namespace kvfuzz {

enum class FailureKind {
  engine_error,  // the engine threw or returned a wrongly shaped chunk
  missing_row,   // the program implies a row the engine did not return
  extra_row,     // the engine returned a row at a key the program does not imply
  not_finite,    // NaN or Inf where the reference is finite
  mismatch,      // |got - expected| above the tolerance
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

struct Verdict {
  bool pass = true;
  std::optional<Divergence> first;
  int rows_compared = 0;
  int rows_failed = 0;
};

using ReferenceMap = std::map<RowKey, ReferenceRow>;

Verdict compare(const std::vector<ExpectedSlot>& slots, const ReferenceMap& reference,
                const EngineRun& run, int q_heads, int value_dim);

}  // namespace kvfuzz
