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
#include "model/mat_mul.h"
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

// Rows' way through a layer and out of the model, around the attention, in T: what the
// cached forward (T = float, the engine's side) and the reference (T = double, the judge's
// side) compute alike. Each function takes m rows at once (every buffer [m][its width]) so
// that the products run as matrix products (mat_mul.h); each row's values are the same bits
// as one row at a time. Each product (and norm) of each row is handed to `rounded` with its
// fan-in: the reference perturbs it there (model_tolerance.cpp models the rounding), the
// cached forward passes Unrounded, since its float arithmetic rounds for real. What the two
// do differently on purpose stays with them: the attention itself (the reference's own
// full-prefix attention in double, the engine under test through its cache), RoPE (the
// reference's; the engine applies its own), q/k/v rounded to the dtype (real in the cached
// forward, modelled in the reference).
// `residual` (h after each residual sum) and `swiglu` (silu(gate) * up) are elementwise,
// not products: they round only where the activations are in a dtype narrower than f32
// (EngineNumerics::activations).
enum class Product {
  attention_norm,
  q,
  k,
  v,
  out,
  mlp_norm,
  gate,
  up,
  down,
  final_norm,
  logits,
  residual,
  swiglu
};

// The cached forward's `rounded`: nothing to add to float arithmetic.
struct Unrounded {
  template <class T>
  void operator()(Product /*product*/, T* /*values*/, size_t /*n*/, size_t /*fan_in*/) const {}
};

// `rounded` on each of the m rows of width n in `values`.
template <class T, class Rounded>
void each_row(Rounded&& rounded, Product product, T* values, size_t m, size_t n, size_t fan_in) {
  for (size_t i = 0; i < m; ++i) rounded(product, values + i * n, n, fan_in);
}

// The attention's inputs of the m rows whose hidden states are h: x = RMSNorm(h), then
// q = x Wq, k = x Wk, v = x Wv.
template <class T, class Rounded>
void rows_qkv(const T* h, size_t m, const TransformerWeights::Layer& w, const Dims& d, T* x, T* q,
              T* k, T* v, Rounded&& rounded) {
  const size_t W = d.width;
  for (size_t i = 0; i < m; ++i) rms_norm(h + i * W, w.attention_norm.data(), W, x + i * W);
  each_row(rounded, Product::attention_norm, x, m, W, W);
  mat_mul(x, m, w.wq, W, d.q_size(), q);
  mat_mul(x, m, w.wk, W, d.k_size(), k);
  mat_mul(x, m, w.wv, W, d.v_size(), v);
  each_row(rounded, Product::q, q, m, d.q_size(), W);
  each_row(rounded, Product::k, k, m, d.k_size(), W);
  each_row(rounded, Product::v, v, m, d.v_size(), W);
}

// The rest of the layer for the m rows whose attention outputs are a: h += a Wo, then
// h += SwiGLU(RMSNorm(h)) (scratch x and o: [m][width]; gate and up: [m][ffn]).
template <class T, class Rounded>
void rows_mlp(const T* a, size_t m, const TransformerWeights::Layer& w, const Dims& d, T* h, T* x,
              T* o, T* gate, T* up, Rounded&& rounded) {
  const size_t W = d.width, F = d.ffn, as = d.attention_size();
  mat_mul(a, m, w.wo, as, W, o);
  each_row(rounded, Product::out, o, m, W, as);
  for (size_t i = 0; i < m * W; ++i) h[i] += o[i];
  each_row(rounded, Product::residual, h, m, W, 2);
  for (size_t i = 0; i < m; ++i) rms_norm(h + i * W, w.mlp_norm.data(), W, x + i * W);
  each_row(rounded, Product::mlp_norm, x, m, W, W);
  mat_mul(x, m, w.w_gate, W, F, gate);
  mat_mul(x, m, w.w_up, W, F, up);
  each_row(rounded, Product::gate, gate, m, F, W);
  each_row(rounded, Product::up, up, m, F, W);
  for (size_t i = 0; i < m * F; ++i) gate[i] = silu(gate[i]) * up[i];
  each_row(rounded, Product::swiglu, gate, m, F, 1);
  mat_mul(gate, m, w.w_down, F, W, o);
  each_row(rounded, Product::down, o, m, W, F);
  for (size_t i = 0; i < m * W; ++i) h[i] += o[i];
  each_row(rounded, Product::residual, h, m, W, 2);
}

// The logits of the m rows whose last hidden states are h: RMSNorm, then the LM head
// (scratch x: [m][width]; logits: [m][vocab]).
template <class T, class Rounded>
void rows_logits(const T* h, size_t m, const TransformerWeights& weights, const Dims& d, T* x,
                 T* logits, Rounded&& rounded) {
  const size_t W = d.width;
  for (size_t i = 0; i < m; ++i) rms_norm(h + i * W, weights.final_norm.data(), W, x + i * W);
  each_row(rounded, Product::final_norm, x, m, W, W);
  mat_mul(x, m, weights.lm_head, W, d.vocab, logits);
  each_row(rounded, Product::logits, logits, m, d.vocab, W);
}

}  // namespace kvfuzz::model
