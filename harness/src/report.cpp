// Reports for people: the first divergence in a few lines, and `explain`'s per-row table.
#include "kvfuzz/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

namespace kvfuzz {

namespace {

// The shortest %g form that reads back as the same double (so that a got and an expected
// that differ never print alike).
std::string exact(double x) {
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, x);
    if (std::isnan(x) || std::strtod(buffer, nullptr) == x) break;
  }
  return buffer;
}

std::string brief(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", x);
  return buffer;
}

std::string origin_text(const RowOrigin& o) {
  return "op " + std::to_string(o.op) + ", chunk " + std::to_string(o.chunk) + ", token " +
         std::to_string(o.token);
}

std::string keys_text(int64_t lo, int64_t hi) {
  const int64_t count = hi - lo + 1;
  return "positions " + std::to_string(lo) + ".." + std::to_string(hi) + " (" +
         std::to_string(count) + (count == 1 ? " key)" : " keys)");
}

}  // namespace

std::string describe_divergence(const Divergence& d) {
  std::string text(failure_kind_name(d.kind));
  const bool has_row = d.key_hi >= d.key_lo;
  switch (d.kind) {
    case FailureKind::mismatch:
    case FailureKind::not_finite:
      text += " at " + to_string(d.key) + " (" + origin_text(d.origin) + "), q head " +
              std::to_string(d.q_head) + ", dim " + std::to_string(d.dim) + "\n";
      text += "  got " + exact(d.got) + ", expected " + exact(d.expected) + ", error " +
              brief(d.error) + ", bound " + brief(d.bound) + "\n";
      break;
    case FailureKind::missing_row:
      text += " at " + to_string(d.key) + " (" + origin_text(d.origin) + ")\n";
      text += "  the engine returned no row at this key; expected " + exact(d.expected) +
              " (q head 0, dim 0), bound " + brief(d.bound) + "\n";
      break;
    case FailureKind::extra_row:
      text += " at " + to_string(d.key) + " (" + origin_text(d.origin) + ")\n";
      text +=
          "  the engine returned a row the program does not imply there; its q head 0, dim "
          "0 is " +
          exact(d.got) + "\n";
      break;
    case FailureKind::engine_error:
      text += " at " + origin_text(d.origin);
      if (has_row) text += ", producing " + to_string(d.key);
      text += "\n";
      break;
  }
  if (has_row) {
    text += d.kind == FailureKind::extra_row ? "  this token's row should see keys at "
                                             : "  this row should see keys at ";
    text += keys_text(d.key_lo, d.key_hi) + "\n";
  }
  if (!d.detail.empty()) text += "  " + d.detail + "\n";
  return text;
}

namespace {

// Same rule as compare.cpp's check_values: NaN never passes, an infinity only where the
// reference has the same one, otherwise |got - expected| <= bound.
bool value_ok(double got, double expected, double bound) {
  if (std::isnan(got)) return false;
  if (!std::isfinite(expected) || !std::isfinite(got)) return got == expected;
  return std::fabs(got - expected) <= bound;
}

constexpr int kShownHeads = 4;
constexpr int kShownDims = 4;

// "7.5" for one head and dim; "7.5 8 | 1 2 ..." for more (heads separated by |).
template <typename Get>
std::string values_text(int q_heads, int value_dim, Get get) {
  std::string text;
  for (int h = 0; h < std::min(q_heads, kShownHeads); ++h) {
    if (h > 0) text += " | ";
    for (int d = 0; d < std::min(value_dim, kShownDims); ++d) {
      if (d > 0) text += " ";
      text += brief(get(h * value_dim + d));
    }
    if (value_dim > kShownDims) text += " ...";
  }
  if (q_heads > kShownHeads) text += " | ...";
  return text;
}

}  // namespace

std::string explain_rows(const Scenario& scenario, const Prepared& prepared,
                         const CheckOutcome& outcome) {
  const int q_heads = scenario.layout.q_heads, value_dim = scenario.layout.value_dim;
  const size_t row_size = static_cast<size_t>(q_heads) * static_cast<size_t>(value_dim);
  const EngineRun& run = outcome.run;

  std::map<RowKey, size_t> by_key;  // first row the engine returned at each key
  for (size_t i = 0; i < run.rows.size(); ++i) by_key.emplace(run.rows[i].key, i);
  std::vector<char> paired(run.rows.size(), 0);

  const auto before_error = [&](const RowOrigin& o) {
    if (!run.error || !run.error_at) return true;
    const RowOrigin& e = *run.error_at;
    return std::tie(o.op, o.chunk, o.token) < std::tie(e.op, e.chunk, e.token);
  };

  std::string text;
  for (const ExpectedSlot& slot : prepared.slots) {
    const auto ref_it = prepared.reference.find(slot.key);
    if (ref_it == prepared.reference.end()) continue;
    const ReferenceRow& ref = ref_it->second;
    text +=
        to_string(slot.key) + "  keys " + std::to_string(ref.key_lo) + ".." +
        std::to_string(ref.key_hi) + "  expected " +
        values_text(q_heads, value_dim, [&](int i) { return ref.values[static_cast<size_t>(i)]; });
    const auto row_it = by_key.find(slot.key);
    if (row_it == by_key.end()) {
      text += before_error(slot.origin) ? "  missing  FAIL\n" : "  not run (engine error)\n";
      continue;
    }
    paired[row_it->second] = 1;
    const EngineRow& row = run.rows[row_it->second];
    bool ok = row.values.size() == row_size;
    for (size_t i = 0; ok && i < row_size; ++i) {
      ok = value_ok(row.values[i], ref.values[i], ref.bound[i / static_cast<size_t>(value_dim)]);
    }
    if (row.values.size() == row_size) {
      text += "  got " + values_text(q_heads, value_dim,
                                     [&](int i) { return row.values[static_cast<size_t>(i)]; });
    } else {
      text += "  got " + std::to_string(row.values.size()) + " values";
    }
    text += ok ? "  ok\n" : "  FAIL\n";
  }
  for (size_t i = 0; i < run.rows.size(); ++i) {
    if (paired[i]) continue;
    const EngineRow& row = run.rows[i];
    text += "extra row at " + to_string(row.key) + " (" + origin_text(row.origin) + ")";
    if (row.values.size() == row_size) {
      text += "  got " + values_text(q_heads, value_dim,
                                     [&](int j) { return row.values[static_cast<size_t>(j)]; });
    }
    text += "  FAIL\n";
  }
  if (run.error) {
    text += "engine error";
    if (run.error_at) text += " at " + origin_text(*run.error_at);
    text += ": " + *run.error + "\n";
  }
  return text;
}

}  // namespace kvfuzz
