// The blocked form of the oracle (reference.h): the plain form's rows, computed for up to eight
// queries at once that share a kv head (the q heads of a GQA group, and consecutive rows), so
// that each key and value loaded serves all of them, in 8-lane vectors
// (reference_kernel.h). Everything around the kernel (rotations, maxima over the visible
// keys, the tolerance) is the plain form's own code (reference_parts.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "judge/query_blocks.h"
#include "judge/reference.h"
#include "judge/reference_kernel.h"
#include "judge/reference_parts.h"
#include "judge/tolerance.h"

namespace kvfuzz {

namespace {

size_t round_up(size_t x, size_t to) {
  return (x + to - 1) / to * to;
}

// The build of the kernel and of its exp for this CPU, chosen once (every build gives the
// same bits).
struct KernelBuild {
  reference_kernel::Kernel attend;
  reference_kernel::ExpKernel exp;
};
KernelBuild choose_build() {
  using namespace reference_kernel;
  if (avx512_available()) return {attend_avx512, exp_nonpositive_avx512};
  if (avx2_fma_available()) return {attend_avx2, exp_nonpositive_avx2};
  return {attend_lanes, exp_nonpositive_lanes};
}
const KernelBuild kBuild = choose_build();

// The largest |score| the table's data can give under the layout: scale times the largest
// q and k norms of one head (Cauchy-Schwarz; RoPE keeps norms).
double largest_score(const Layout& layout, const TokenTable& table) {
  const auto hd = static_cast<size_t>(layout.head_dim);
  const auto largest_norm = [&](auto row_of) {
    double largest = 0;
    for (int t = 0; t < table.count(); ++t) {
      const std::span<const float> row = row_of(t);
      for (size_t h = 0; h + hd <= row.size(); h += hd) {
        double sum = 0;
        for (size_t d = h; d < h + hd; ++d) sum += static_cast<double>(row[d]) * row[d];
        largest = std::max(largest, sum);
      }
    }
    return std::sqrt(largest);
  };
  return layout.softmax_scale() * largest_norm([&](int t) { return table.q(t); }) *
         largest_norm([&](int t) { return table.k(t); });
}

// Scores this large come from a score spread (generate/score_spreads.h): the generator's
// moderate data under the default scale 1/sqrt(head_dim) stays under 16 sqrt(head_dim),
// 362 at head_dim 512. (An explicit scale near 2 at a large head_dim also reaches it: the
// plain form is slower there, not wrong.)
constexpr double kSpreadScores = 2048;

}  // namespace

std::vector<ReferenceRow> reference_rows(const Layout& layout, const TokenTable& table,
                                         const LogicalStream& stream,
                                         const EngineNumerics& numerics) {
  // The plain form under a score spread (a scale of 2 or more, or large q and k:
  // generate/score_spreads.h makes scores thousands large): there the two forms' bounds
  // disagreed past 1e-12 (2e-6 relative in f32, up to 80x with f16 scores, whose logit
  // error grows with the scores, and the blocked form sums in another order); the plain
  // form is the definition. Every declared numerics set takes the blocked form otherwise:
  // on test_reference_blocked's 120 generated scenarios bf16 P agrees with the plain form
  // to 2.8e-16 and f16 scores to 6.7e-13 of max(bound, M) (issue 24; the plain form, their
  // path before, made the reference 4x to 7x slower).
  // The logit features (soft cap, sinks, ALiBi) take the plain form too: the blocked
  // kernel computes plain scores (chunked_local only moves the first visible key).
  const bool logit_features = layout.softcap || !layout.sinks.empty() || !layout.alibi.empty();
  // A q8_1 query's block sums add a term per key block that only the plain form computes;
  // so does the key-by-key softmax term of rotated keys in a quantized format, whose rare
  // ambiguous blocks would otherwise widen every row that sees them (tolerance.cpp, 13).
  const bool block_sums = numerics.query_blocks && takes_q8_1(layout.k_format.quant);
  const bool quantized_rotated = layout.rope_theta && layout.k_format.quantized();
  if (logit_features || block_sums || quantized_rotated || layout.scale.value_or(0.0) >= 2.0 ||
      largest_score(layout, table) >= kSpreadScores) {
    return reference_rows_plain(layout, table, stream, numerics);
  }
  return reference_kernel::blocked_rows(layout, table, stream, numerics, kBuild.attend);
}

std::vector<ReferenceRow> reference_kernel::blocked_rows(const Layout& layout,
                                                         const TokenTable& table,
                                                         const LogicalStream& stream,
                                                         const EngineNumerics& numerics,
                                                         Kernel attend) {
  using namespace reference_parts;
  using reference_kernel::kLanes;
  using reference_kernel::kMaxQueries;
  using reference_kernel::kTile;
  const int n = static_cast<int>(stream.tokens.size());
  const int first_row = static_cast<int>(std::max<int64_t>(0, stream.first_row));
  std::vector<ReferenceRow> rows;
  if (first_row >= n) return rows;
  const int group = std::max(1, layout.group());
  const auto hd = static_cast<size_t>(layout.head_dim);
  const auto vd = static_cast<size_t>(layout.value_dim);
  thread_local StreamKeys keys;
  stream_keys(layout, table, stream, numerics, keys);
  for (int p = first_row; p < n; ++p) rows.push_back(empty_row(layout, stream, p));

  // A block: `heads` q heads of one group times `span` consecutive rows.
  const int heads = std::min(group, kMaxQueries);
  const int span = std::max(1, kMaxQueries / heads);
  const size_t stride = round_up(static_cast<size_t>(n), kTile) + kTile;
  const size_t v_stride = round_up(vd, kLanes);
  std::vector<double> kt(hd * stride), v(static_cast<size_t>(n) * v_stride), v_abs(v.size()),
      scores(kMaxQueries * stride), weights(scores.size()), out(kMaxQueries * v_stride),
      q(kMaxQueries * hd), q_error(hd);
  std::vector<std::pair<double, double>> q_norms(kMaxQueries);
  std::vector<std::pair<float, double>> cells;
  reference_kernel::Block b;
  b.kt = kt.data();
  b.head_dim = layout.head_dim;
  b.v = v.data();
  b.v_abs = v_abs.data();
  b.v_stride = v_stride;
  b.stride = stride;
  b.scale = layout.softmax_scale();
  // The weighted mean |v| enters only some numerics' tolerance (tolerance.cpp).
  b.magnitude_needed = needs_value_magnitude(numerics);
  b.scores = scores.data();
  b.weights = weights.data();
  b.out = out.data();
  for (int g = 0; g < layout.kv_heads; ++g) {
    // This kv head's keys transposed and values padded (zeros past the ends).
    for (int j = 0; j < n; ++j) {
      const double* key = keys.keys.data() + static_cast<size_t>(j) * keys.k_stride + g * hd;
      for (size_t d = 0; d < hd; ++d) kt[d * stride + static_cast<size_t>(j)] = key[d];
      const double* value = keys.values.data() + static_cast<size_t>(j) * keys.v_stride + g * vd;
      for (size_t d = 0; d < vd; ++d) {
        v[static_cast<size_t>(j) * v_stride + d] = value[d];
        if (b.magnitude_needed) v_abs[static_cast<size_t>(j) * v_stride + d] = std::fabs(value[d]);
      }
    }
    // A per-channel key format: kt's first `whole` groups hold their quantized keys (the rows
    // of a block all read the same groups quantized: StreamKeys::key).
    int whole = 0;
    const auto set_group = [&](int c, const std::vector<double>& from) {
      for (int j = c * keys.group; j < (c + 1) * keys.group; ++j) {
        const double* key = from.data() + static_cast<size_t>(j) * keys.k_stride + g * hd;
        for (size_t d = 0; d < hd; ++d) kt[d * stride + static_cast<size_t>(j)] = key[d];
      }
    };
    for (int h0 = g * group; h0 < (g + 1) * group; h0 += heads) {
      const int block_heads = std::min(heads, (g + 1) * group - h0);
      for (; whole > 0; --whole) set_group(whole - 1, keys.keys);
      for (int p0 = first_row, block_rows = 0; p0 < n; p0 += block_rows) {
        block_rows = std::min(span, n - p0);
        if (keys.group > 0) {
          const int groups = (p0 + 1) / keys.group;  // whole for p0, and up to the block's end
          block_rows = std::min(block_rows, (groups + 1) * keys.group - 1 - p0);
          for (; whole < groups; ++whole) set_group(whole, keys.grouped);
        }
        b.queries = block_heads * block_rows;
        int lo = p0;
        for (int qi = 0; qi < b.queries; ++qi) {
          const int p = p0 + qi / block_heads, h = h0 + qi % block_heads;
          double* qp = q.data() + static_cast<size_t>(qi) * hd;
          q_norms[static_cast<size_t>(qi)] =
              rotated_query(layout, table, stream, numerics, p, h, qp, q_error.data());
          b.q[qi] = qp;
          b.lo[qi] = static_cast<int>(layout.first_visible(p));
          b.hi[qi] = p;
          lo = std::min(lo, b.lo[qi]);
        }
        b.first = lo / kLanes * kLanes;
        b.end = p0 + block_rows;
        attend(b);
        KeyMaxima maxima;
        for (int qi = 0; qi < b.queries; ++qi) {
          const int p = p0 + qi / block_heads, h = h0 + qi % block_heads;
          ReferenceRow& row = rows[static_cast<size_t>(p - first_row)];
          std::copy_n(
              out.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(qi) * v_stride), vd,
              row.values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(h) * vd));
          const HeadAttention attention{
              .p = scores.data() + static_cast<size_t>(qi) * stride + (b.lo[qi] - b.first),
              .visible = p - b.lo[qi] + 1,
              .total = b.total[qi],
              .deviation = b.deviation[qi],
              .magnitude = b.magnitude[qi],
              .min_abs_score = 0,  // no soft cap on this form
          };
          const auto [q_norm, q_error_norm] = q_norms[static_cast<size_t>(qi)];
          // The maxima depend on the query only through the rotated keys' ambiguity: without
          // it, once per row for the block's heads.
          if (keys.has_key_error || qi % block_heads == 0) {
            maxima = key_maxima(layout, keys, b.lo[qi], p, g, b.q[qi]);
          }
          finish_head(row, h, layout, numerics, attention, maxima, q_norm, q_error_norm, cells);
        }
      }
    }
  }
  return rows;
}

namespace reference_kernel {

void exp_nonpositive(double* x, size_t n) {
  kBuild.exp(x, n);
}

}  // namespace reference_kernel

}  // namespace kvfuzz
