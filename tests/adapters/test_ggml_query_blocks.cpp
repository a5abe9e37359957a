// The judge's model of the query ggml hands a block-quantized K (judge/query_blocks.h,
// tolerance.cpp step 14) against ggml-cpu's own quantizers: the q8_0 and q8_1 from_float of
// the vendored ggml, as ggml_flash_attn_ext and mul_mat call them, read back as the dot
// products read them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "judge/query_blocks.h"
#include "kvfuzz/dtype.h"

namespace kvfuzz {
namespace {

// What ggml-cpu's quantizer for `type` (q8_0 or q8_1) makes of one row: the values
// f16(d) * quant, and (q8_1) the stored block sums s.
struct Quantized {
  std::vector<double> values;
  std::vector<double> sums;
};

Quantized ggml_quantize(ggml_type type, const std::vector<float>& x) {
  const auto* traits = ggml_get_type_traits_cpu(type);
  std::vector<uint8_t> bytes(ggml_row_size(type, static_cast<int64_t>(x.size())));
  traits->from_float(x.data(), bytes.data(), static_cast<int64_t>(x.size()));
  Quantized out;
  const size_t block = ggml_type_size(type);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const uint8_t* p = bytes.data() + b * block;
    uint16_t d_bits, s_bits = 0;
    std::memcpy(&d_bits, p, 2);
    if (type == GGML_TYPE_Q8_1) std::memcpy(&s_bits, p + 2, 2);
    const auto* qs = reinterpret_cast<const int8_t*>(p + (type == GGML_TYPE_Q8_1 ? 4 : 2));
    const double d = f16_to_f32(d_bits);
    for (int i = 0; i < 32; ++i) out.values.push_back(d * qs[i]);
    out.sums.push_back(f16_to_f32(s_bits));
  }
  return out;
}

std::vector<float> row(uint64_t seed, int n, float range) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = range * (static_cast<float>(state >> 40) / 16777216.0f * 2.0f - 1.0f);
  }
  return x;
}

TEST(GgmlQueryBlocks, ValuesAreGgmlsQ8_0BitForBitAndRandomRowsAreNotAmbiguous) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    for (const float range : {1.0f, 1e-3f, 300.0f}) {
      const std::vector<float> x = row(seed, 128, range);
      std::vector<double> q(x.begin(), x.end());
      const double ambiguity = quantize_query_blocks(q.data(), q.size(), KvQuant::q8_0);
      const Quantized g = ggml_quantize(GGML_TYPE_Q8_0, x);
      for (size_t i = 0; i < q.size(); ++i) {
        ASSERT_EQ(q[i], g.values[i]) << "seed " << seed << " range " << range << " element " << i;
      }
      EXPECT_EQ(ambiguity, 0.0) << "seed " << seed << " range " << range;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 600);
}

// Small integers put x * 127 / amax on exact halves: the row below has amax 254, so
// x * 127 / 254 = x / 2 ties for every odd x. ggml's x86 quantizer rounds 1.5 and 2.5 to 2,
// its reference one to 2 and 3: the model keeps x86's and reports the disagreement.
TEST(GgmlQueryBlocks, TiesTheQuantizersRoundApartAreReportedAsAmbiguity) {
  std::vector<float> x(32, 0.0f);
  x[0] = 254.0f;
  x[1] = 5.0f;  // 2.5: 2 (x86) against 3 (reference)
  x[2] = 3.0f;  // 1.5: 2 and 2, no disagreement
  std::vector<double> q(x.begin(), x.end());
  const double ambiguity = quantize_query_blocks(q.data(), q.size(), KvQuant::q8_0);
  const Quantized g = ggml_quantize(GGML_TYPE_Q8_0, x);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(q[i], g.values[i]) << i;
  EXPECT_EQ(q[1], 4.0);       // d = 2, quant 2
  EXPECT_EQ(ambiguity, 2.0);  // one element, f16(d) = 2 apart
}

// For a q4_1 or q5_1 key ggml takes q8_1, whose stored sum s meets the key's block minimum:
// the model's quants are q8_1's, and the bound covers |s - f16(d) * sum| for every block.
TEST(GgmlQueryBlocks, Q8_1SumsDepartFromTheQuantsByNoMoreThanTheBound) {
  double largest_share = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<float> x = row(seed, 64, 10.0f);
    std::vector<double> q(x.begin(), x.end());
    const double bound = quantize_query_blocks(q.data(), q.size(), KvQuant::q4_1);
    const Quantized g = ggml_quantize(GGML_TYPE_Q8_1, x);
    double squares = 0;
    for (size_t b = 0; b < 2; ++b) {
      double sum = 0;
      for (size_t i = 0; i < 32; ++i) {
        ASSERT_EQ(q[b * 32 + i], g.values[b * 32 + i]) << "seed " << seed;
        sum += g.values[b * 32 + i];
      }
      squares += (g.sums[b] - sum) * (g.sums[b] - sum);
    }
    ASSERT_LE(std::sqrt(squares), bound) << "seed " << seed;
    if (bound > 0) largest_share = std::max(largest_share, std::sqrt(squares) / bound);
  }
  EXPECT_GT(largest_share, 0.0);  // the sums do depart: the term is not vacuous
}

}  // namespace
}  // namespace kvfuzz
