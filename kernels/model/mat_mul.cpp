// mat_mul_f64 and mat_mul_f32 (mat_mul.h): tiles of 4 rows x 8 outputs in AVX2 registers
// where the CPU has AVX2 (chosen at run time: the project builds for the baseline x86-64),
// else the portable tiles. Each lane does what the portable form does for its output: a multiply,
// then an add to its own running sum, in r order (no FMA: "avx2" alone does not enable it), so both
// give the same bits.
#include "model/mat_mul.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVFUZZ_MAT_MUL_AVX2 1
#endif

namespace kvfuzz::model {

#ifdef KVFUZZ_MAT_MUL_AVX2
namespace {

// Rows [0, 4) of x times the 8 outputs from c0 on.
__attribute__((target("avx2"))) void tile_4x8(const double* x, const float* w, size_t rows,
                                              size_t cols, size_t c0, double* out) {
  __m256d sum[4][2];
  for (auto& row : sum) row[0] = row[1] = _mm256_setzero_pd();
  for (size_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols + c0;
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(wr));
    const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(wr + 4));
    for (size_t i = 0; i < 4; ++i) {
      const __m256d xi = _mm256_set1_pd(x[i * rows + r]);
      sum[i][0] = _mm256_add_pd(sum[i][0], _mm256_mul_pd(xi, lo));
      sum[i][1] = _mm256_add_pd(sum[i][1], _mm256_mul_pd(xi, hi));
    }
  }
  for (size_t i = 0; i < 4; ++i) {
    _mm256_storeu_pd(out + i * cols + c0, sum[i][0]);
    _mm256_storeu_pd(out + i * cols + c0 + 4, sum[i][1]);
  }
}

// Rows [0, 4) of x times the 8 outputs from c0 on, in f32 lanes.
__attribute__((target("avx2"))) void tile_4x8(const float* x, const float* w, size_t rows,
                                              size_t cols, size_t c0, float* out) {
  __m256 sum[4];
  for (auto& row : sum) row = _mm256_setzero_ps();
  for (size_t r = 0; r < rows; ++r) {
    const __m256 wr = _mm256_loadu_ps(w + r * cols + c0);
    for (size_t i = 0; i < 4; ++i) {
      sum[i] = _mm256_add_ps(sum[i], _mm256_mul_ps(_mm256_set1_ps(x[i * rows + r]), wr));
    }
  }
  for (size_t i = 0; i < 4; ++i) _mm256_storeu_ps(out + i * cols + c0, sum[i]);
}

template <class T>
__attribute__((target("avx2"))) void mat_mul_avx2(const T* x, size_t m, const float* w, size_t rows,
                                                  size_t cols, T* out) {
  constexpr size_t kBlock = 8;
  const size_t whole = cols - cols % kBlock;
  size_t i = 0;
  for (; i + 4 <= m; i += 4) {
    for (size_t c0 = 0; c0 < whole; c0 += kBlock) {
      tile_4x8(x + i * rows, w, rows, cols, c0, out + i * cols);
    }
    // The outputs past the last whole tile, one at a time (as the portable form does).
    for (size_t c = whole; c < cols; ++c) {
      for (size_t t = 0; t < 4; ++t) {
        T sum = 0;
        for (size_t r = 0; r < rows; ++r) {
          sum += x[(i + t) * rows + r] * static_cast<T>(w[r * cols + c]);
        }
        out[(i + t) * cols + c] = sum;
      }
    }
  }
  if (i < m) mat_mul_portable(x + i * rows, m - i, w, rows, cols, out + i * cols);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace
#endif

bool mat_mul_uses_avx2() {
#ifdef KVFUZZ_MAT_MUL_AVX2
  return has_avx2();
#else
  return false;
#endif
}

void mat_mul_f64(const double* x, size_t m, const float* w, size_t rows, size_t cols, double* out) {
#ifdef KVFUZZ_MAT_MUL_AVX2
  if (has_avx2()) return mat_mul_avx2(x, m, w, rows, cols, out);
#endif
  mat_mul_portable(x, m, w, rows, cols, out);
}

void mat_mul_f32(const float* x, size_t m, const float* w, size_t rows, size_t cols, float* out) {
#ifdef KVFUZZ_MAT_MUL_AVX2
  if (has_avx2()) return mat_mul_avx2(x, m, w, rows, cols, out);
#endif
  mat_mul_portable(x, m, w, rows, cols, out);
}

}  // namespace kvfuzz::model
