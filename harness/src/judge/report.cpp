// Reports for people: the first divergence in a few lines, and `explain`'s per-row table.
#include "judge/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

namespace kvfuzz {

std::string format_exact(double x) {
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, x);
    if (std::isnan(x) || std::strtod(buffer, nullptr) == x) break;
  }
  return buffer;
}

namespace {

std::string brief(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", x);
  return buffer;
}

std::string keys_text(int64_t lo, int64_t hi) {
  const int64_t count = hi - lo + 1;
  return "positions " + std::to_string(lo) + ".." + std::to_string(hi) + " (" +
         std::to_string(count) + (count == 1 ? " key)" : " keys)");
}

// A mismatch whose error is a few ulps at the expected value of the precision the engine
// works in is what rounding gives, not a wrong key or value. Keyed to the declared output
// dtype: an engine that declares f16 or bf16 rows gets the hint only within a few ulps of
// that dtype, and is asked what else it rounds; one that declares f32 rows (nothing) gets
// it within a few bf16 ulps, what a kernel that rounds its output or P to a 16-bit dtype
// gives (that rounding alone is up to half an ulp, far above an f32 bound), and is asked
// to declare it. Nothing for larger errors, which no rounding explains; a named wrong
// position (Divergence::hypothesis) is printed instead of this line.
std::string precision_hint(const Divergence& d) {
  constexpr double kFewUlps = 4;
  // A bound of 0 is a bitwise claim's: any difference fails it, whatever the precision.
  // (A model-level value is many roundings past the attention: no one rounding explains it.)
  if (d.kind != FailureKind::mismatch || d.site != ModelSite::none || d.bound == 0 ||
      d.expected == 0 || !std::isfinite(d.error)) {
    return {};
  }
  if (d.output != DType::f32) {
    const double ulps = d.error / dtype_spacing(d.output, d.expected);
    if (ulps > kFewUlps) return {};
    char text[200];
    std::snprintf(text, sizeof text,
                  "  precision: the error is %.2g %s ulps of the expected value, the dtype the "
                  "engine declares its rows in: ",
                  ulps, std::string(dtype_name(d.output)).c_str());
    return text + std::string(
                      "more rounding than it declares; does it round something else too (P, "
                      "scores, split partials, RoPE tables: docs/writing-an-engine.md, "
                      "\"Numerics\")?\n");
  }
  const double bf16_ulps = d.error / dtype_spacing(DType::bf16, d.expected);
  if (bf16_ulps > kFewUlps) return {};
  char text[160];
  std::snprintf(text, sizeof text,
                "  precision: the error is %.2g f16 ulps, %.2g bf16 ulps of the expected value: ",
                d.error / dtype_spacing(DType::f16, d.expected), bf16_ulps);
  return text +
         std::string(
             "an engine that rounds its output or P to f16 or bf16 differs by about that much; "
             "does the engine declare its numerics (output dtype, P dtype: "
             "docs/writing-an-engine.md, \"Numerics\")?\n");
}

// Where a value lies: "q head 1, dim 3" in an attention row; at model level "logits, token
// id 17", "layer 1 attention, q head 0, value 3" or "layer 0 hidden, value 9".
std::string value_place(const Divergence& d) {
  switch (d.site) {
    case ModelSite::none:
      return "q head " + std::to_string(d.q_head) + ", dim " + std::to_string(d.dim);
    case ModelSite::logits:
      return "logits, token id " + std::to_string(d.dim);
    case ModelSite::attention:
      return "layer " + std::to_string(d.layer) + " attention, q head " + std::to_string(d.q_head) +
             ", value " + std::to_string(d.dim);
    default:
      return "layer " + std::to_string(d.layer) + " " + std::string(model_site_name(d.site)) +
             ", value " + std::to_string(d.dim);
  }
}

// ", layer 2" for a model-level position or error inside a layer; "" otherwise.
std::string layer_suffix(const Divergence& d) {
  return d.site != ModelSite::none && d.layer >= 0 ? ", layer " + std::to_string(d.layer) : "";
}

}  // namespace

std::string describe_divergence(const Divergence& d) {
  std::string text(failure_kind_name(d.kind));
  const bool has_row = d.key_hi >= d.key_lo;
  switch (d.kind) {
    case FailureKind::mismatch:
    case FailureKind::not_finite:
      text +=
          " at " + to_string(d.key) + " (" + to_string(d.origin) + "), " + value_place(d) + "\n";
      text += "  got " + format_exact(d.got) + ", expected " + format_exact(d.expected) +
              ", error " + brief(d.error) + ", bound " + brief(d.bound) + "\n";
      break;
    case FailureKind::wrong_position:
      text += " at " + to_string(d.key) + " (" + to_string(d.origin) + ")" + layer_suffix(d) + "\n";
      break;
    case FailureKind::engine_error:
    case FailureKind::race:
    case FailureKind::barrier_divergence:
      text += " at " + to_string(d.origin) + layer_suffix(d);
      if (has_row || d.site == ModelSite::logits) text += ", producing " + to_string(d.key);
      text += "\n";
      break;
  }
  // An engine error is a call that failed, not a row with wrong values: the keys a row
  // would have seen say nothing about it.
  if (has_row && !is_engine_error(d.kind)) {
    text += "  this row should see keys at " + keys_text(d.key_lo, d.key_hi) + "\n";
  }
  if (!d.detail.empty()) text += "  " + d.detail + "\n";
  // A named wrong position explains the row; a guess at rounding would point away from it.
  text += d.hypothesis.empty() ? precision_hint(d) : "  " + d.hypothesis + "\n";
  return text;
}

namespace {

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

// The bound of the row's loosest q head and what it is made of, largest part first
// ("bound 3.82e-05: sums 3.81e-05, softmax 9.54e-08 (logit error 2.38e-07)"), plus half an
// output ulp for an engine that rounds its rows.
std::string bound_text(const ReferenceRow& ref, DType output) {
  if (ref.bound.empty() || ref.bound_parts.size() != ref.bound.size()) return "";
  const auto loosest =
      static_cast<size_t>(std::max_element(ref.bound.begin(), ref.bound.end()) - ref.bound.begin());
  const BoundParts& p = ref.bound_parts[loosest];
  std::vector<std::pair<double, const char*>> parts = {{p.softmax, "softmax"},
                                                       {p.sums, "sums"},
                                                       {p.p_rounding, "P rounding"},
                                                       {p.combine, "split combine"}};
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text = "  bound " + brief(ref.bound[loosest]);
  if (ref.bound.size() > 1) text += " (q head " + std::to_string(loosest) + ")";
  std::string listed;
  for (const auto& [value, name] : parts) {
    if (value > 0)
      listed += (listed.empty() ? ": " : ", ") + std::string(name) + " " + brief(value);
  }
  text += listed;
  if (p.softmax > 0) text += " (logit error " + brief(p.logit_error) + ")";
  if (output != DType::f32) text += " + half a " + std::string(dtype_name(output)) + " ulp";
  return text;
}

}  // namespace

std::string explain_rows(const Scenario& scenario, const Prepared& prepared,
                         const CheckOutcome& outcome) {
  const int q_heads = scenario.layout.q_heads, value_dim = scenario.layout.value_dim;
  const size_t row_size = static_cast<size_t>(q_heads) * static_cast<size_t>(value_dim);
  const EngineRun& run = outcome.run;
  std::map<std::tuple<int, int, int>, const EngineRow*> by_origin;
  for (const EngineRow& row : run.rows) {
    by_origin.emplace(std::tuple{row.origin.op, row.origin.chunk, row.origin.token}, &row);
  }

  std::string text;
  for (size_t s = 0; s < prepared.slots.size(); ++s) {
    const ExpectedSlot& slot = prepared.slots[s];
    const ReferenceRow& ref = prepared.reference.at(slot.key);
    text +=
        to_string(slot.key) + "  keys " + std::to_string(ref.key_lo) + ".." +
        std::to_string(ref.key_hi) + "  expected " +
        values_text(q_heads, value_dim, [&](int i) { return ref.values[static_cast<size_t>(i)]; });
    const RowStatus status = outcome.verdict.status.at(s);
    if (status == RowStatus::not_run) {
      text += "  not run (engine error)\n";
      continue;
    }
    const auto found = by_origin.find({slot.origin.op, slot.origin.chunk, slot.origin.token});
    if (found != by_origin.end()) {
      const EngineRow& row = *found->second;
      if (row.key != slot.key) text += "  reported at " + to_string(row.key);
      if (row.values.size() == row_size) {
        text += "  got " + values_text(q_heads, value_dim,
                                       [&](int i) { return row.values[static_cast<size_t>(i)]; });
      } else {
        text += "  got " + std::to_string(row.values.size()) + " values";
      }
    } else {
      text += "  no row";
    }
    text += bound_text(ref, prepared.numerics.output);
    switch (status) {
      case RowStatus::ok:
        text += "  ok\n";
        break;
      case RowStatus::unjudged:
        text += "  ok (not judged: bound >= max |v|)\n";
        break;
      default:
        text += "  FAIL\n";
        break;
    }
  }
  if (run.error) {
    text += "engine error";
    if (run.error_at) text += " at " + to_string(*run.error_at);
    text += ": " + *run.error + "\n";
  }
  return text;
}

}  // namespace kvfuzz
