// The attention math every CPU engine shares: RoPE, the float dot product, and the
// single-pass softmax-weighted sum over a range of keys. All accumulation is in float.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "cpu/kv_array.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::cpu {

// Keys [lo, hi] (inclusive) in an engine's storage index space.
struct KeyRange {
  int64_t lo = 0;
  int64_t hi = -1;
  int64_t count() const { return hi >= lo ? hi - lo + 1 : 0; }
};

// RoPE's angles at one position. For pair i in [0, dim/2): inv_freq = theta^(-2i/dim),
// angle = pos * inv_freq in double, cos and sin cast to float. cos/sin hold dim/2 floats.
void rope_angles(int dim, int64_t pos, double theta, float* cos_out, float* sin_out);
// Pair i of the shape's part (RopeShape::pair: (x_i, x_{i+dims/2}) half-split, (x_2i, x_2i+1)
// interleaved, after the part's offset), (a, b) -> (a cos_i - b sin_i, a sin_i + b cos_i), in
// place; the elements before the part stay. cos/sin from rope_angles(shape.dims, ...).
void rope_apply(float* x, const RopeShape& shape, const float* cos_in, const float* sin_in);
// The same as a model computing in `dtype` does it (HF transformers' apply_rotary_pos_emb on
// bf16 tensors): cos and sin already rounded to it, and each product and the sum too.
void rope_apply_in(float* x, const RopeShape& shape, const float* cos_in, const float* sin_in,
                   DType dtype);

// sum_i a[i] * b[i] in float, in index order (the order KvArray::dot uses).
float dot(const float* a, const float* b, size_t n);

// Where key j of one kv head lives: element offsets into the K and V arrays.
struct KvOffsets {
  size_t k = 0;
  size_t v = 0;
};

// K and V storage plus their row widths.
struct KvArrays {
  const KvArray& k;
  const KvArray& v;
  size_t head_dim;
  size_t value_dim;
};

// How the weighted sum of values rounds, as the engine's declared numerics say
// (EngineNumerics::p and value_accumulation): P rounded to a dtype before it multiplies the
// values (the normaliser sums the unrounded P, as FlashAttention-2 does), and P.V summed in
// f16 within runs of kF16RunKeys keys, each run then added to the f32 sum (as a decode
// kernel whose lanes accumulate in half precision and merge in f32). Why runs: a long f16
// sum stagnates once its terms fall below half an ulp of the sum, and overflows: four
// terms of P <= 1 times the generator's largest |v| (8188) stay below f16's 65504.
inline constexpr size_t kF16RunKeys = 4;

// vLLM's paged attention divides by sum + 1e-6 (EngineNumerics::p_normalised).
inline constexpr float kNormaliserEpsilon = 1e-6f;

struct Arithmetic {
  std::optional<DType> p;
  bool f16_values = false;
  // P = exp(s - m) * (1 / (l + kNormaliserEpsilon)) rounded to `p`, nothing divided
  // afterwards (vLLM's paged attention): a second sweep over the keys once m and l are known.
  bool normalised_p = false;
  // Split partials combined as (O_s, lse_s) (FlashAttention-2's combine), and the dtype
  // they are stored in before the combine.
  bool lse_combine = false;
  DType partials = DType::f32;

  float weight(float w) const { return p ? round_to_dtype(w, *p) : w; }
};

// The layout's logit features for one (query, q head), as the CPU engines compute them in
// f32 (Layout: softcap, alibi, sinks). Key and query are positions (a CPU engine's storage
// index is its position).
struct LogitFeatures {
  float softcap = 0;  // 0: none; else s -> softcap * tanh(s / softcap)
  float slope = 0;    // ALiBi: s += slope * (key - query)
  int64_t query = 0;
  std::optional<float> sink;  // a softmax term with this logit and no value

  // The logit of a key at `key` whose score (scale * q.k) is `score`.
  float logit(float score, int64_t key) const {
    if (softcap > 0) score = softcap * std::tanh(score / softcap);
    if (slope != 0) score += slope * static_cast<float>(key - query);
    return score;
  }
};

// Scratch that only grows: scores, one decoded value row and an f16 run's sums.
struct AttentionScratch {
  std::vector<float> scores, value, run;
};

// acc[d] += w * element[at + d], or the same into the f16 run when the values sum in f16.
inline void add_value(const KvArray& values, size_t at, float w, size_t n, const Arithmetic& arith,
                      AttentionScratch& scratch, float* acc) {
  if (!arith.f16_values) return values.add_scaled(at, w, acc, n);
  values.read(at, scratch.value.data(), n);
  for (size_t d = 0; d < n; ++d) {
    const float term = round_to_dtype(w * scratch.value[d], DType::f16);
    scratch.run[d] = round_to_dtype(scratch.run[d] + term, DType::f16);
  }
}

// Adds an f16 run's sums to acc (f32) and starts the next run.
inline void flush_run(const Arithmetic& arith, AttentionScratch& scratch, float* acc, size_t n) {
  if (!arith.f16_values) return;
  for (size_t d = 0; d < n; ++d) {
    acc[d] += scratch.run[d];
    scratch.run[d] = 0;
  }
}

inline void prepare_scratch(AttentionScratch& scratch, size_t keys, size_t value_dim) {
  if (scratch.scores.size() < keys) scratch.scores.resize(keys);
  scratch.value.resize(value_dim);
  scratch.run.assign(value_dim, 0.0f);
}

// Single-pass softmax attention of one query over `keys`: logits (scale * q.k and the
// features), their max (the sink's included), exp, sum, weighted sum of values, divided by
// the sum. key_at(j) -> KvOffsets. Writes value_dim floats to out.
template <class KeyAt>
void single_pass_attention(const float* q, KeyRange keys, float scale, const KvArrays& kv,
                           KeyAt key_at, const Arithmetic& arith, const LogitFeatures& features,
                           AttentionScratch& scratch, float* out) {
  const size_t n = static_cast<size_t>(keys.count());
  prepare_scratch(scratch, n, kv.value_dim);
  std::vector<float>& scores = scratch.scores;
  float max_score = features.sink.value_or(-std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = keys.lo + static_cast<int64_t>(i);
    const float s = features.logit(scale * kv.k.dot(key_at(j).k, q, kv.head_dim), j);
    scores[i] = s;
    if (s > max_score) max_score = s;
  }
  // The sink: a term of the normaliser with no value.
  const float sink = features.sink ? std::exp(*features.sink - max_score) : 0.0f;
  for (size_t d = 0; d < kv.value_dim; ++d) out[d] = 0;
  if (arith.normalised_p) {  // the exponentials and their sum first, then P.V
    float sum = sink;
    for (size_t i = 0; i < n; ++i) {
      scores[i] = std::exp(scores[i] - max_score);
      sum += scores[i];
    }
    const float inv = 1.0f / (sum + kNormaliserEpsilon);
    for (size_t i = 0; i < n; ++i) {
      add_value(kv.v, key_at(keys.lo + static_cast<int64_t>(i)).v, arith.weight(scores[i] * inv),
                kv.value_dim, arith, scratch, out);
      if ((i + 1) % kF16RunKeys == 0 || i + 1 == n) flush_run(arith, scratch, out, kv.value_dim);
    }
    return;
  }
  float sum = sink;
  for (size_t i = 0; i < n; ++i) {
    const float w = std::exp(scores[i] - max_score);
    sum += w;
    add_value(kv.v, key_at(keys.lo + static_cast<int64_t>(i)).v, arith.weight(w), kv.value_dim,
              arith, scratch, out);
    if ((i + 1) % kF16RunKeys == 0 || i + 1 == n) flush_run(arith, scratch, out, kv.value_dim);
  }
  for (size_t d = 0; d < kv.value_dim; ++d) out[d] /= sum;
}

}  // namespace kvfuzz::cpu
