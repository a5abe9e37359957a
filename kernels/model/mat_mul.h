// The model level's matrix products: out[i][c] = sum_r x[i][r] * w[r][c] for the m rows i
// of x ([m][rows]; w row-major [rows][cols], f32 weights; out [m][cols]), each output
// accumulated in T in r order. Every output is the same sum of the same terms in the same
// order whatever the tiling or the vector width, so the same bits as one row and one output
// at a time, on every machine (a multiply then an add, never fused).
//
// Why tiles: a product one row at a time loads and converts every weight once per row; the
// reference (T = double) runs nine passes a check over every position of the program, and
// that made it most of a model-level check (docs/BENCHMARKS.md, "Model level"). A tile of
// rows x 8 outputs keeps its sums in registers over all of r and converts each weight once
// for all its rows.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

namespace kvfuzz::model {

// Rows [0, R) of x times w, in tiles of R rows x 8 outputs, then the outputs past the last
// whole tile one at a time.
template <size_t R, class T>
void mat_mul_tile_rows(const T* x, const float* w, size_t rows, size_t cols, T* out) {
  constexpr size_t kBlock = 8;
  size_t c0 = 0;
  for (; c0 + kBlock <= cols; c0 += kBlock) {
    T sum[R][kBlock] = {};
    for (size_t r = 0; r < rows; ++r) {
      T wr[kBlock];
      for (size_t j = 0; j < kBlock; ++j) wr[j] = static_cast<T>(w[r * cols + c0 + j]);
      for (size_t i = 0; i < R; ++i) {
        const T xi = x[i * rows + r];
        for (size_t j = 0; j < kBlock; ++j) sum[i][j] += xi * wr[j];
      }
    }
    for (size_t i = 0; i < R; ++i) {
      for (size_t j = 0; j < kBlock; ++j) out[i * cols + c0 + j] = sum[i][j];
    }
  }
  for (size_t c = c0; c < cols; ++c) {
    for (size_t i = 0; i < R; ++i) {
      T sum = 0;
      for (size_t r = 0; r < rows; ++r) sum += x[i * rows + r] * static_cast<T>(w[r * cols + c]);
      out[i * cols + c] = sum;
    }
  }
}

// The portable form: two rows at a time (their 16 sums fit SSE2's registers as doubles).
template <class T>
void mat_mul_portable(const T* x, size_t m, const float* w, size_t rows, size_t cols, T* out) {
  size_t i = 0;
  for (; i + 2 <= m; i += 2) mat_mul_tile_rows<2>(x + i * rows, w, rows, cols, out + i * cols);
  if (i < m) mat_mul_tile_rows<1>(x + i * rows, w, rows, cols, out + i * cols);
}

// The double and float forms (mat_mul.cpp): AVX2 tiles of 4 rows where the CPU has AVX2,
// else the portable form; the same bits either way (tests/model/test_model_lanes.cpp).
void mat_mul_f64(const double* x, size_t m, const float* w, size_t rows, size_t cols, double* out);
void mat_mul_f32(const float* x, size_t m, const float* w, size_t rows, size_t cols, float* out);

// Whether mat_mul_f64 and mat_mul_f32 use AVX2 on this CPU (for the tests to say so).
bool mat_mul_uses_avx2();

template <class T>
void mat_mul(const T* x, size_t m, const std::vector<float>& w, size_t rows, size_t cols, T* out) {
  if constexpr (std::is_same_v<T, double>) {
    mat_mul_f64(x, m, w.data(), rows, cols, out);
  } else if constexpr (std::is_same_v<T, float>) {
    mat_mul_f32(x, m, w.data(), rows, cols, out);
  } else {
    mat_mul_portable(x, m, w.data(), rows, cols, out);
  }
}

}  // namespace kvfuzz::model
