// The arithmetic both evaluations of the tiny transformer share, written once as templates
// over the element type: float for the cached forward (what a server computes), double for
// the reference (harness/src/model/reference_forward.h, the judge's side). Shared by
// kernels/model and harness/src/model.
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

}  // namespace kvfuzz::model
