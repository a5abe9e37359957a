// The arithmetic both evaluations of the tiny transformer share, written once as templates
// over the element type: float for the cached forward (what a server computes), double for
// the reference. Private to kernels/model and harness/src/model.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "model/transformer.h"

namespace kvfuzz::model {

// RMSNorm's epsilon, added to the mean square.
inline constexpr double kNormEps = 1e-5;

// out = gain * x / sqrt(mean(x^2) + eps), accumulated in T.
template <class T>
void rms_norm(const T* x, const float* gain, size_t n, T* out) {
  T sum = 0;
  for (size_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const T inv = T(1) / std::sqrt(sum / static_cast<T>(n) + static_cast<T>(kNormEps));
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(gain[i]) * (x[i] * inv);
}

// out[c] = sum_r x[r] * w[r * cols + c] (w row-major [rows][cols]), accumulated in T in r order.
// Eight outputs at a time, their sums kept in registers over all of r: the same terms added
// in the same order as one output at a time (the same bits), without a load and a store of
// out[c] per term, which made the model level's reference passes memory-bound.
template <class T>
void mat_vec(const T* x, const std::vector<float>& w, size_t rows, size_t cols, T* out) {
  constexpr size_t kBlock = 8;
  size_t c0 = 0;
  for (; c0 + kBlock <= cols; c0 += kBlock) {
    T sum[kBlock] = {};
    const float* column = w.data() + c0;
    for (size_t r = 0; r < rows; ++r) {
      const T xr = x[r];
      const float* row = column + r * cols;
      for (size_t i = 0; i < kBlock; ++i) sum[i] += xr * static_cast<T>(row[i]);
    }
    for (size_t i = 0; i < kBlock; ++i) out[c0 + i] = sum[i];
  }
  for (size_t c = c0; c < cols; ++c) {
    T sum = 0;
    for (size_t r = 0; r < rows; ++r) sum += x[r] * static_cast<T>(w[r * cols + c]);
    out[c] = sum;
  }
}

template <class T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

// The shapes of one model: widths of every vector a layer computes.
struct Dims {
  size_t vocab = 0, width = 0, ffn = 0, layers = 0;
  size_t q_heads = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
  size_t q_size() const { return q_heads * head_dim; }
  size_t k_size() const { return kv_heads * head_dim; }
  size_t v_size() const { return kv_heads * value_dim; }
  size_t attention_size() const { return q_heads * value_dim; }
};

Dims dims_of(const ModelConfig& model, const Layout& layout);

// Relative noise injected into a reference evaluation to model the rounding an honest
// cached forward does (harness/src/model/model_tolerance.cpp decides the magnitudes and
// says why). Every term multiplies a uniform draw in [-1, 1): a hash (the project's
// splitmix64) of `seed`, the place and the value perturbed, so equal values are perturbed
// alike, as rounding does.
struct Perturbation {
  uint64_t seed = 0;
  double qkv = 0;         // q, k, v elements: qkv * |x| (rounding to the layout's dtype)
  double projection = 0;  // every matrix-vector product: projection * sqrt(fan_in) * rms(out)
  double rope = 0;        // rotated q and k: (rope + rope_per_position * p) * rms(head)
  double rope_per_position = 0;
  double k_store = 0;    // rotated k stored again in the dtype: k_store * |x| (RoPE only)
  double attention = 0;  // attention output: attention * (2 sqrt(n) + 4) * max |v| visible
  // Declared numerics (EngineNumerics; model_tolerance.cpp says which declaration sets
  // which term):
  double q_store = 0;          // rotated q rounded to the dtype: q_store * |x| (RoPE only)
  double score_sum = 0;        // each score: score_sum * 2 sqrt(head_dim) * scale * sum |q_i k_i|
  double p_round = 0;          // each softmax weight: p_round * |w|
  double attention_round = 0;  // each attention output value: attention_round * |x|
  double logits_round = 0;     // each logit: logits_round * |x|
};

// The reference evaluation, optionally perturbed: every (sequence, epoch) stream on its full
// prefix, in double. `perturbation` null: the exact reference (reference_transformer).
std::map<RowKey, TransformerRow> evaluate_reference(const Scenario& scenario,
                                                    const TransformerWeights& weights,
                                                    const Perturbation* perturbation);

}  // namespace kvfuzz::model
