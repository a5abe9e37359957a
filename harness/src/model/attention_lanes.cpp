// attention_lanes.h: AVX2 lanes where the CPU has them (4 keys' scores at once; the value sum
// held in registers over all keys, 16 values at a time), else the plain loops.
#include "model/attention_lanes.h"

#include <algorithm>

#include "model/mat_mul.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVFUZZ_ATTENTION_AVX2 1
#endif

namespace kvfuzz::model {

void key_dots_plain(const double* q, size_t head_dim, const double* kt, size_t stride, size_t count,
                    double* out) {
  for (size_t j = 0; j < count; ++j) {
    double dot = 0;
    for (size_t i = 0; i < head_dim; ++i) dot += q[i] * kt[i * stride + j];
    out[j] = dot;
  }
}

void weighted_values_plain(const double* w, size_t count, const double* v, size_t stride,
                           size_t value_dim, double* out) {
  std::fill(out, out + value_dim, 0.0);
  for (size_t j = 0; j < count; ++j) {
    for (size_t i = 0; i < value_dim; ++i) out[i] += w[j] * v[j * stride + i];
  }
}

#ifdef KVFUZZ_ATTENTION_AVX2
namespace {

__attribute__((target("avx2"))) void key_dots_avx2(const double* q, size_t head_dim,
                                                   const double* kt, size_t stride, size_t count,
                                                   double* out) {
  size_t j = 0;
  for (; j + 8 <= count; j += 8) {
    __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
    for (size_t i = 0; i < head_dim; ++i) {
      const __m256d qi = _mm256_set1_pd(q[i]);
      a = _mm256_add_pd(a, _mm256_mul_pd(qi, _mm256_loadu_pd(kt + i * stride + j)));
      b = _mm256_add_pd(b, _mm256_mul_pd(qi, _mm256_loadu_pd(kt + i * stride + j + 4)));
    }
    _mm256_storeu_pd(out + j, a);
    _mm256_storeu_pd(out + j + 4, b);
  }
  for (; j + 4 <= count; j += 4) {
    __m256d a = _mm256_setzero_pd();
    for (size_t i = 0; i < head_dim; ++i) {
      a = _mm256_add_pd(a,
                        _mm256_mul_pd(_mm256_set1_pd(q[i]), _mm256_loadu_pd(kt + i * stride + j)));
    }
    _mm256_storeu_pd(out + j, a);
  }
  if (j < count) key_dots_plain(q, head_dim, kt + j, stride, count - j, out + j);
}

__attribute__((target("avx2"))) void weighted_values_avx2(const double* w, size_t count,
                                                          const double* v, size_t stride,
                                                          size_t value_dim, double* out) {
  size_t i0 = 0;
  for (; i0 + 16 <= value_dim; i0 += 16) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t j = 0; j < count; ++j) {
      const __m256d wj = _mm256_set1_pd(w[j]);
      const double* vj = v + j * stride + i0;
      s0 = _mm256_add_pd(s0, _mm256_mul_pd(wj, _mm256_loadu_pd(vj)));
      s1 = _mm256_add_pd(s1, _mm256_mul_pd(wj, _mm256_loadu_pd(vj + 4)));
      s2 = _mm256_add_pd(s2, _mm256_mul_pd(wj, _mm256_loadu_pd(vj + 8)));
      s3 = _mm256_add_pd(s3, _mm256_mul_pd(wj, _mm256_loadu_pd(vj + 12)));
    }
    _mm256_storeu_pd(out + i0, s0);
    _mm256_storeu_pd(out + i0 + 4, s1);
    _mm256_storeu_pd(out + i0 + 8, s2);
    _mm256_storeu_pd(out + i0 + 12, s3);
  }
  for (; i0 + 4 <= value_dim; i0 += 4) {
    __m256d s = _mm256_setzero_pd();
    for (size_t j = 0; j < count; ++j) {
      s = _mm256_add_pd(s,
                        _mm256_mul_pd(_mm256_set1_pd(w[j]), _mm256_loadu_pd(v + j * stride + i0)));
    }
    _mm256_storeu_pd(out + i0, s);
  }
  if (i0 < value_dim) weighted_values_plain(w, count, v + i0, stride, value_dim - i0, out + i0);
}

}  // namespace
#endif

void key_dots(const double* q, size_t head_dim, const double* kt, size_t stride, size_t count,
              double* out) {
#ifdef KVFUZZ_ATTENTION_AVX2
  if (mat_mul_uses_avx2()) return key_dots_avx2(q, head_dim, kt, stride, count, out);
#endif
  key_dots_plain(q, head_dim, kt, stride, count, out);
}

void weighted_values(const double* w, size_t count, const double* v, size_t stride,
                     size_t value_dim, double* out) {
#ifdef KVFUZZ_ATTENTION_AVX2
  if (mat_mul_uses_avx2()) return weighted_values_avx2(w, count, v, stride, value_dim, out);
#endif
  weighted_values_plain(w, count, v, stride, value_dim, out);
}

}  // namespace kvfuzz::model
