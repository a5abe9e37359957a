// The attention math every CPU engine shares: RoPE, the float dot product, and the
// single-pass softmax-weighted sum over a range of keys. All accumulation is in float.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/dtype_array.h"

namespace kvfuzz::cpu {

// Keys [lo, hi] (inclusive) in an engine's storage index space.
struct KeyRange {
  int64_t lo = 0;
  int64_t hi = -1;
  int64_t count() const { return hi >= lo ? hi - lo + 1 : 0; }
};

// RoPE (NeoX half-split) at one position. For i in [0, dim/2): inv_freq = theta^(-2i/dim),
// angle = pos * inv_freq in double, cos and sin cast to float. cos/sin hold dim/2 floats.
void rope_angles(int dim, int64_t pos, double theta, float* cos_out, float* sin_out);
// (x_i, x_{i+dim/2}) -> (x_i cos - x_{i+dim/2} sin, x_i sin + x_{i+dim/2} cos), in place.
// validate() requires an even dim with RoPE.
void rope_apply(float* x, int dim, const float* cos_in, const float* sin_in);

// sum_i a[i] * b[i] in float, in index order (the order DTypeArray::dot uses).
float dot(const float* a, const float* b, size_t n);

// Where key j of one kv head lives: element offsets into the K and V arrays.
struct KvOffsets {
  size_t k = 0;
  size_t v = 0;
};

// K and V storage plus their row widths.
struct KvArrays {
  const DTypeArray& k;
  const DTypeArray& v;
  size_t head_dim;
  size_t value_dim;
};

// Single-pass softmax attention of one query over `keys`: scores (scale * q.k), their max,
// exp, sum, weighted sum of values, divided by the sum. key_at(j) -> KvOffsets. `scores` is
// scratch that only grows. Writes value_dim floats to out.
template <class KeyAt>
void single_pass_attention(const float* q, KeyRange keys, float scale, const KvArrays& kv,
                           KeyAt key_at, std::vector<float>& scores, float* out) {
  const size_t n = static_cast<size_t>(keys.count());
  if (scores.size() < n) scores.resize(n);
  float max_score = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const KvOffsets at = key_at(keys.lo + static_cast<int64_t>(i));
    const float s = scale * kv.k.dot(at.k, q, kv.head_dim);
    scores[i] = s;
    if (s > max_score) max_score = s;
  }
  for (size_t d = 0; d < kv.value_dim; ++d) out[d] = 0;
  float sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const float w = std::exp(scores[i] - max_score);
    sum += w;
    kv.v.add_scaled(key_at(keys.lo + static_cast<int64_t>(i)).v, w, out, kv.value_dim);
  }
  for (size_t d = 0; d < kv.value_dim; ++d) out[d] /= sum;
}

}  // namespace kvfuzz::cpu
