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

// One row's way through a layer and out of the model, around the attention, in T: what the
// cached forward (T = float, the engine's side) and the reference (T = double, the judge's
// side) compute alike. Each product (and norm) is handed to `rounded` with its fan-in: the
// reference perturbs it there (model_tolerance.cpp models the rounding), the cached forward
// passes Unrounded, since its float arithmetic rounds for real. What the two do differently
// on purpose stays with them: the attention itself (the reference's own full-prefix
// attention in double, the engine under test through its cache), RoPE (the reference's; the
// engine applies its own), q/k/v rounded to the dtype (real in the cached forward, modelled
// in the reference).
enum class Product { attention_norm, q, k, v, out, mlp_norm, gate, up, down, final_norm, logits };

// The cached forward's `rounded`: nothing to add to float arithmetic.
struct Unrounded {
  template <class T>
  void operator()(Product /*product*/, T* /*values*/, size_t /*n*/, size_t /*fan_in*/) const {}
};

// The attention's inputs of the row whose hidden state is h: x = RMSNorm(h), then
// q = x Wq, k = x Wk, v = x Wv.
template <class T, class Rounded>
void row_qkv(const T* h, const TransformerWeights::Layer& w, const Dims& d, T* x, T* q, T* k, T* v,
             Rounded&& rounded) {
  const size_t W = d.width;
  rms_norm(h, w.attention_norm.data(), W, x);
  rounded(Product::attention_norm, x, W, W);
  mat_vec(x, w.wq, W, d.q_size(), q);
  mat_vec(x, w.wk, W, d.k_size(), k);
  mat_vec(x, w.wv, W, d.v_size(), v);
  rounded(Product::q, q, d.q_size(), W);
  rounded(Product::k, k, d.k_size(), W);
  rounded(Product::v, v, d.v_size(), W);
}

// The rest of the layer for the row whose attention output is a: h += a Wo, then
// h += SwiGLU(RMSNorm(h)) (x, o, gate, up: scratch of width, width, ffn, ffn).
template <class T, class Rounded>
void row_mlp(const T* a, const TransformerWeights::Layer& w, const Dims& d, T* h, T* x, T* o,
             T* gate, T* up, Rounded&& rounded) {
  const size_t W = d.width, F = d.ffn, as = d.attention_size();
  mat_vec(a, w.wo, as, W, o);
  rounded(Product::out, o, W, as);
  for (size_t i = 0; i < W; ++i) h[i] += o[i];
  rms_norm(h, w.mlp_norm.data(), W, x);
  rounded(Product::mlp_norm, x, W, W);
  mat_vec(x, w.w_gate, W, F, gate);
  mat_vec(x, w.w_up, W, F, up);
  rounded(Product::gate, gate, F, W);
  rounded(Product::up, up, F, W);
  for (size_t i = 0; i < F; ++i) gate[i] = silu(gate[i]) * up[i];
  mat_vec(gate, w.w_down, F, W, o);
  rounded(Product::down, o, W, F);
  for (size_t i = 0; i < W; ++i) h[i] += o[i];
}

// The logits of the row whose last hidden state is h: RMSNorm, then the LM head.
template <class T, class Rounded>
void row_logits(const T* h, const TransformerWeights& weights, const Dims& d, T* x, T* logits,
                Rounded&& rounded) {
  const size_t W = d.width;
  rms_norm(h, weights.final_norm.data(), W, x);
  rounded(Product::final_norm, x, W, W);
  mat_vec(x, weights.lm_head, W, d.vocab, logits);
  rounded(Product::logits, logits, d.vocab, W);
}

}  // namespace kvfuzz::model
