// The oracle. Everything here is double precision and written the obvious way: for every
// query position p of one (sequence, epoch) stream, every q head, look at keys
// [lo, p], score them, softmax them, average the values. No chunks, no pages, no caches.
#include "judge/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>

#include "judge/tolerance.h"
#include "scenario/rope.h"

namespace kvfuzz {

namespace {

// Euclidean norm of one head vector. A rounding error in a q.k dot product is
// proportional to sum_d |q_d||k_d| <= ||q|| ||k|| (Cauchy-Schwarz). The norm bound also holds
// for RoPE, whose rotation errors are relative per rotated pair rather than per element,
// and the norms are the same before and after the rotation. It costs O(1) per key in the
// loop below instead of a second dot product.
double norm(const double* x, int head_dim) {
  double sum = 0;
  for (int d = 0; d < head_dim; ++d) sum += x[d] * x[d];
  return std::sqrt(sum);
}

// out += w * v. The pointers never alias; saying so lets the compiler vectorise the loop
// that is otherwise half of the reference's time.
void add_scaled(double* __restrict out, const double* __restrict v, double w, int n) {
#pragma omp simd
  for (int d = 0; d < n; ++d) out[d] += w * v[d];
}

// Rotated keys cached in the storage dtype (tolerance.cpp, step 5): round the rotated head
// as the engine stores it, and record in `error` each element the engine's f32 rotation
// may round to the neighbour (2e + spacing; 0 for the others). `raw` is the unrotated head
// at position `pos`; `exact_angles`: the engine computes its angles in double
// (EngineNumerics::rope_angles_exact). Returns whether any element is such.
bool store_rotated(double* head, const float* raw, size_t head_dim, int64_t pos, DType dtype,
                   bool exact_angles, double* error) {
  const size_t half = head_dim / 2;
  const double angle = exact_angles ? 0 : 20 * static_cast<double>(pos);
  const double reach = (4 + angle) * 0x1p-24;
  bool any = false;
  for (size_t d = 0; d < head_dim; ++d) {
    const size_t i = d % half;
    const double e = reach * (std::fabs(double{raw[i]}) + std::fabs(double{raw[i + half]}));
    const double x = head[d];
    const float low = round_to_dtype(static_cast<float>(x - e), dtype);
    const float high = round_to_dtype(static_cast<float>(x + e), dtype);
    head[d] = round_to_dtype(static_cast<float>(x), dtype);
    error[d] = low == high ? 0 : 2 * e + dtype_spacing(dtype, std::fabs(x) + e);
    any = any || error[d] > 0;
  }
  return any;
}

// What P rounding needs of one row (tolerance.cpp, step 8): the weights of the keys whose P
// is not exactly 1, pooled by the cell of the P dtype their P rounds into. `p` holds
// exp(logit - max) per key, `total` their sum.
struct PWeights {
  double spread = 0, mass = 0;
  int subnormal = 0;
};

PWeights p_weights(const std::vector<double>& p, int count, double total, DType dtype,
                   std::vector<std::pair<float, double>>& cells) {
  PWeights out;
  cells.clear();
  for (int j = 0; j < count; ++j) {
    const double pj = p[static_cast<size_t>(j)];
    if (pj == 1) continue;  // the maximum's own P is exact
    if (pj < dtype_min_normal(dtype)) ++out.subnormal;
    cells.emplace_back(round_to_dtype(static_cast<float>(pj), dtype), pj / total);
  }
  std::sort(cells.begin(), cells.end());
  double squares = 0;
  for (size_t i = 0; i < cells.size();) {
    double cell = 0;
    size_t k = i;
    for (; k < cells.size() && cells[k].first == cells[i].first; ++k) cell += cells[k].second;
    squares += cell * cell;
    out.mass += cell;
    i = k;
  }
  out.spread = std::sqrt(squares);
  return out;
}

}  // namespace

std::vector<ReferenceRow> reference_rows(const Layout& layout, const TokenTable& table,
                                         const LogicalStream& stream,
                                         const EngineNumerics& numerics) {
  const int n = static_cast<int>(stream.tokens.size());
  const int q_heads = layout.q_heads, kv_heads = layout.kv_heads;
  const int head_dim = layout.head_dim, value_dim = layout.value_dim;
  const int group = std::max(1, layout.group());
  const bool rope = layout.rope_theta.has_value();
  const double scale = layout.softmax_scale();
  const auto hd = static_cast<size_t>(head_dim);
  const auto vd = static_cast<size_t>(value_dim);

  // Per position and kv head: the key rotated to its own position, its norm (see norm()),
  // the values and max |v|. [pos][kv_head][head_dim or value_dim],
  // [pos][kv_head].
  const size_t k_stride = static_cast<size_t>(kv_heads) * hd;
  std::vector<double> keys(static_cast<size_t>(n) * k_stride);
  std::vector<double> key_norm(static_cast<size_t>(n) * static_cast<size_t>(kv_heads));
  std::vector<double> value_max(static_cast<size_t>(n) * static_cast<size_t>(kv_heads));
  const size_t v_stride = static_cast<size_t>(kv_heads) * vd;
  std::vector<double> values(static_cast<size_t>(n) * v_stride);
  // Rotated keys cached in the storage dtype: per element, the error the engine's f32
  // rotation may add at a rounding boundary, and per (key, kv head) whether there is any.
  const bool exact_angles = numerics.rope_angles_exact.value_or(false);
  const bool round_rotated =
      rope && numerics.rotated_keys_in_storage.value_or(false) && layout.dtype != DType::f32;
  std::vector<double> key_error(round_rotated ? keys.size() : 0);
  std::vector<char> key_ambiguous(round_rotated ? key_norm.size() : 0);
  for (int j = 0; j < n; ++j) {
    const int id = stream.tokens[static_cast<size_t>(j)];
    const auto k = table.k(id);
    const auto v = table.v(id);
    double* dst = keys.data() + static_cast<size_t>(j) * k_stride;
    std::copy(k.begin(), k.end(), dst);
    std::copy(v.begin(), v.end(),
              values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(j) * v_stride));
    for (int g = 0; g < kv_heads; ++g) {
      double* head = dst + static_cast<size_t>(g) * hd;
      if (rope) rope_rotate(head, hd, *layout.rope_theta, j);
      if (round_rotated) {
        const size_t at = static_cast<size_t>(j) * k_stride + static_cast<size_t>(g) * hd;
        key_ambiguous[at / hd] = store_rotated(head, k.data() + static_cast<size_t>(g) * hd, hd, j,
                                               layout.dtype, exact_angles, key_error.data() + at);
      }
      key_norm[static_cast<size_t>(j) * static_cast<size_t>(kv_heads) + static_cast<size_t>(g)] =
          norm(head, head_dim);
      double largest = 0;
      for (size_t d = 0; d < vd; ++d) {
        largest =
            std::max(largest, std::fabs(static_cast<double>(v[static_cast<size_t>(g) * vd + d])));
      }
      value_max[static_cast<size_t>(j) * static_cast<size_t>(kv_heads) + static_cast<size_t>(g)] =
          largest;
    }
  }

  std::vector<ReferenceRow> rows;
  rows.reserve(static_cast<size_t>(n));
  const bool round_rotated_q =
      rope && numerics.rotated_queries_in_storage.value_or(false) && layout.dtype != DType::f32;
  std::vector<double> q(hd), q_error(hd), logits, deviation(vd), magnitude(vd);
  std::vector<std::pair<float, double>> cells;
  for (int p = static_cast<int>(std::max<int64_t>(0, stream.first_row)); p < n; ++p) {
    const int lo = layout.window ? std::max(0, p - std::max(1, *layout.window) + 1) : 0;
    const int visible = p - lo + 1;
    ReferenceRow row;
    row.key = RowKey{stream.seq, stream.epoch, p};
    row.key_lo = lo;
    row.key_hi = p;
    row.values.assign(static_cast<size_t>(q_heads) * vd, 0.0);
    row.bound.assign(static_cast<size_t>(q_heads), 0.0);
    row.value_scale.assign(static_cast<size_t>(q_heads), 0.0);
    row.bound_parts.assign(static_cast<size_t>(q_heads), BoundParts{});
    const auto q_all = table.q(stream.tokens[static_cast<size_t>(p)]);
    for (int h = 0; h < q_heads; ++h) {
      const int g = h / group;
      const size_t head_at = static_cast<size_t>(g) * hd;
      std::copy_n(q_all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(h) * hd),
                  head_dim, q.begin());
      if (rope) rope_rotate(q.data(), hd, *layout.rope_theta, p);
      // Rotated queries rounded to the storage dtype: as the keys (store_rotated), their
      // boundary elements' error reaches every logit through ||k|| (Cauchy-Schwarz).
      double q_error_norm = 0;
      if (round_rotated_q && store_rotated(q.data(), q_all.data() + static_cast<size_t>(h) * hd, hd,
                                           p, layout.dtype, exact_angles, q_error.data())) {
        q_error_norm = norm(q_error.data(), head_dim);
      }
      const double q_norm = norm(q.data(), head_dim);

      // Scores, their max, and the tolerance inputs S and M over the visible keys.
      logits.resize(static_cast<size_t>(visible));
      double max_logit = -HUGE_VAL, max_key_norm = 0, max_value = 0, ambiguity = 0;
      // (Raw pointers: this loop is the reference's whole cost, also in unoptimised builds.)
      const double* qp = q.data();
      double* lp = logits.data();
      for (int j = lo; j <= p; ++j) {
        const size_t key_at = static_cast<size_t>(j) * k_stride + head_at;
        const double* kp = keys.data() + key_at;
        // `omp simd` lets the compiler reorder this double sum into vector lanes; the
        // result is as exact as any summation order.
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < head_dim; ++d) dot += qp[d] * kp[d];
        const double logit = scale * dot;
        lp[j - lo] = logit;
        if (logit > max_logit) max_logit = logit;
        const size_t jg =
            static_cast<size_t>(j) * static_cast<size_t>(kv_heads) + static_cast<size_t>(g);
        max_key_norm = std::max(max_key_norm, key_norm[jg]);
        max_value = std::max(max_value, value_max[jg]);
        if (round_rotated && key_ambiguous[jg]) {
          double error = 0;
          for (int d = 0; d < head_dim; ++d) error += std::fabs(qp[d]) * key_error[key_at + d];
          ambiguity = std::max(ambiguity, std::fabs(scale) * error);
        }
      }
      const double max_terms = std::fabs(scale) * q_norm * max_key_norm;
      ambiguity += std::fabs(scale) * q_error_norm * max_key_norm;

      // Softmax with the max subtracted, then the weighted mean of the values.
      double total = 0;
      for (int j = 0; j < visible; ++j) {
        lp[j] = std::exp(lp[j] - max_logit);
        total += lp[j];
      }
      double* out = row.values.data() + static_cast<size_t>(h) * vd;
      for (int j = lo; j <= p; ++j) {
        const double w = lp[j - lo] / total;
        const double* v =
            values.data() + static_cast<size_t>(j) * v_stride + static_cast<size_t>(g) * vd;
        add_scaled(out, v, w, value_dim);
      }
      // The values' mean absolute deviation around the row, per dim (tolerance.cpp, step 4).
      // And their mean magnitude, for f16 value sums (step 7).
      std::fill(deviation.begin(), deviation.end(), 0.0);
      std::fill(magnitude.begin(), magnitude.end(), 0.0);
      for (int j = lo; j <= p; ++j) {
        const double w = lp[j - lo] / total;
        const double* v =
            values.data() + static_cast<size_t>(j) * v_stride + static_cast<size_t>(g) * vd;
        for (size_t d = 0; d < vd; ++d) {
          deviation[d] += w * std::fabs(v[d] - out[d]);
          magnitude[d] += w * std::fabs(v[d]);
        }
      }
      const PWeights pw =
          numerics.p ? p_weights(logits, visible, total, *numerics.p, cells) : PWeights{};

      row.value_scale[static_cast<size_t>(h)] = max_value;
      const BoundParts parts = tolerance_parts(ToleranceInputs{
          .dtype = layout.dtype,
          .numerics = numerics,
          .visible_keys = visible,
          .head_dim = head_dim,
          .max_abs_value = max_value,
          .max_score_terms = max_terms,
          .value_deviation = *std::max_element(deviation.begin(), deviation.end()),
          .value_magnitude = *std::max_element(magnitude.begin(), magnitude.end()),
          .rope = rope,
          .position = p,
          .rotated_key_ambiguity = ambiguity,
          .p_weight_spread = pw.spread,
          .p_weight_mass = pw.mass,
          .p_subnormal_keys = pw.subnormal,
      });
      row.bound_parts[static_cast<size_t>(h)] = parts;
      row.bound[static_cast<size_t>(h)] = parts.softmax + parts.sums + parts.p_rounding;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvfuzz
