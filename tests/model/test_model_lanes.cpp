// The model level's loops over many values at once give every value the bits of its plain
// sum: mat_mul (kernels/model/mat_mul.h) in the portable tiles and the AVX2 ones, and the
// reference's key_dots and weighted_values (harness/src/model/attention_lanes.h), for every
// shape the tiles split unevenly (rows not a multiple of 2 or 4, outputs not a multiple of
// 8, keys not a multiple of 4, values not a multiple of 4 or 16). The reference and the
// cached forward rely on it: their rows must not depend on the CPU, nor on how many rows a
// product took at once.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "kvfuzz/prng.h"
#include "model/attention_lanes.h"
#include "model/mat_mul.h"

namespace kvfuzz::model {
namespace {

template <class T>
std::vector<T> plain(const std::vector<T>& x, size_t m, const std::vector<float>& w, size_t rows,
                     size_t cols) {
  std::vector<T> out(m * cols);
  for (size_t i = 0; i < m; ++i) {
    for (size_t c = 0; c < cols; ++c) {
      T sum = 0;
      for (size_t r = 0; r < rows; ++r) sum += x[i * rows + r] * static_cast<T>(w[r * cols + c]);
      out[i * cols + c] = sum;
    }
  }
  return out;
}

template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what,
                      size_t m, size_t rows, size_t cols) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<Bits>(got[i]), std::bit_cast<Bits>(want[i]))
        << what << ": output " << i << " of m " << m << " x rows " << rows << " x cols " << cols;
  }
}

TEST(MatMul, EveryOutputHasTheBitsOfItsPlainSumInEveryTiling) {
  uint64_t state = 0x6d61746d756cull;
  const auto uniform = [&] { return uniform_from_bits(splitmix64(state)); };
  int shapes = 0;
  for (size_t m : {1, 2, 3, 4, 5, 7, 9}) {
    for (size_t rows : {1, 3, 16, 64, 67}) {
      for (size_t cols : {1, 5, 8, 13, 64, 130}) {
        std::vector<double> x(m * rows);
        std::vector<float> xf(m * rows), w(rows * cols);
        for (size_t i = 0; i < x.size(); ++i) {
          x[i] = uniform() * 3.0;
          xf[i] = static_cast<float>(x[i]);
        }
        for (float& v : w) v = static_cast<float>(uniform());
        const std::vector<double> want = plain(x, m, w, rows, cols);
        std::vector<double> got(m * cols), portable(m * cols);
        mat_mul(x.data(), m, w, rows, cols, got.data());
        mat_mul_portable(x.data(), m, w.data(), rows, cols, portable.data());
        expect_same_bits(got, want, "mat_mul<double>", m, rows, cols);
        expect_same_bits(portable, want, "mat_mul_portable<double>", m, rows, cols);
        std::vector<float> gotf(m * cols), portablef(m * cols);
        const std::vector<float> wantf = plain(xf, m, w, rows, cols);
        mat_mul(xf.data(), m, w, rows, cols, gotf.data());
        mat_mul_portable(xf.data(), m, w.data(), rows, cols, portablef.data());
        expect_same_bits(gotf, wantf, "mat_mul<float>", m, rows, cols);
        expect_same_bits(portablef, wantf, "mat_mul_portable<float>", m, rows, cols);
        ++shapes;
      }
    }
  }
  EXPECT_EQ(shapes, 7 * 5 * 6);
  // Which form the double products took here: both are held to the same bits above.
  std::printf("mat_mul on this CPU: %s\n", mat_mul_uses_avx2() ? "AVX2" : "portable");
}

TEST(AttentionLanes, ScoresAndValueSumsHaveTheBitsOfThePlainLoops) {
  uint64_t state = 0x6c616e6573ull;
  const auto uniform = [&] { return uniform_from_bits(splitmix64(state)) * 2.0; };
  for (size_t count : {1, 3, 4, 5, 8, 11, 17, 64}) {
    for (size_t dim : {1, 3, 4, 7, 16, 19, 36}) {
      const size_t stride = count + 3;  // keys of other heads between rows, as in the reference
      std::vector<double> q(dim), kt(dim * stride), w(count), v(count * (dim + 2));
      for (double& x : q) x = uniform();
      for (double& x : kt) x = uniform();
      for (double& x : w) x = uniform();
      for (double& x : v) x = uniform();
      std::vector<double> got(count), want(count);
      key_dots(q.data(), dim, kt.data(), stride, count, got.data());
      key_dots_plain(q.data(), dim, kt.data(), stride, count, want.data());
      expect_same_bits(got, want, "key_dots", count, dim, stride);
      std::vector<double> sum(dim), plain_sum(dim);
      weighted_values(w.data(), count, v.data(), dim + 2, dim, sum.data());
      weighted_values_plain(w.data(), count, v.data(), dim + 2, dim, plain_sum.data());
      expect_same_bits(sum, plain_sum, "weighted_values", count, dim, dim + 2);
      // The plain loops are the sums they say they are.
      double first = 0;
      for (size_t i = 0; i < dim; ++i) first += q[i] * kt[i * stride];
      EXPECT_EQ(std::bit_cast<uint64_t>(want[0]), std::bit_cast<uint64_t>(first));
    }
  }
}

}  // namespace
}  // namespace kvfuzz::model
