// The judge's model of the query ggml hands a block-quantized K (judge/query_blocks.h,
// tolerance.cpp step 14) against ggml-cpu's own quantizers: the q8_0 and q8_1 from_float of
// the vendored ggml, as ggml_flash_attn_ext and mul_mat call them, read back as the dot
// products read them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <utility>
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
  ggml_cpu_init();  // the CPU backend's tables and function pointers (idempotent)
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
      const double ambiguity = quantize_query_blocks(q.data(), q.size(), KvQuant::q8_0).ambiguity;
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

// Where x * 127 / amax (x86) and x * (1 / d) (ARM) land on either side of a half, the two
// SIMD quantizers round an element apart: the model keeps x86's quant and reports f16(d) per
// such element. Found by search over random rows (a few in a thousand elements); exact ties
// (small integers, x * 127 / amax = 2.5) round alike, to even, and are not ambiguous.
TEST(GgmlQueryBlocks, ElementsTheReciprocalsRoundApartAreReportedAsAmbiguity) {
  int found = 0;
  for (uint64_t seed = 1; seed <= 2000 && found < 5; ++seed) {
    const std::vector<float> x = row(seed, 32, 7.0f);
    float amax = 0;
    for (const float v : x) amax = std::max(amax, std::fabs(v));
    const float d = amax / 127.0f, id_x86 = 127.0f / amax, id_arm = 1.0f / d;
    int apart = 0;
    for (const float v : x) apart += std::nearbyint(v * id_x86) != std::nearbyint(v * id_arm);
    std::vector<double> q(x.begin(), x.end());
    const double ambiguity = quantize_query_blocks(q.data(), q.size(), KvQuant::q8_0).ambiguity;
    const Quantized g = ggml_quantize(GGML_TYPE_Q8_0, x);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], g.values[i]) << "seed " << seed;
    const double d16 = f16_to_f32(f32_to_f16(d));
    EXPECT_DOUBLE_EQ(ambiguity, d16 * std::sqrt(static_cast<double>(apart))) << "seed " << seed;
    found += apart > 0;
  }
  EXPECT_GE(found, 1);  // the search does meet such rows
  std::vector<float> ties(32, 0.0f);
  ties[0] = 254.0f;
  ties[1] = 5.0f;  // 2.5: 2 on both
  std::vector<double> q(ties.begin(), ties.end());
  EXPECT_EQ(quantize_query_blocks(q.data(), q.size(), KvQuant::q8_0).ambiguity, 0.0);
  EXPECT_EQ(q[1], 4.0);  // d = 2, quant 2
}

// For a q4_1 or q5_1 key ggml takes q8_1, whose stored block sum s joins the dot product as
// m_b s_b: the model's score, the quantized query against the dequantized key plus
// sum_b m_b sum_error[b], is ggml-cpu's own vec_dot (q4_1 x q8_1, q5_1 x q8_1) to within its
// f32 arithmetic, where leaving the block sums out is off by far more.
TEST(GgmlQueryBlocks, Q8_1ScoresAreGgmlsDotProductWithTheBlockSums) {
  ggml_cpu_init();
  double worst_with = 0, worst_without = 0;
  for (const auto& [key_type, format] :
       {std::pair{GGML_TYPE_Q4_1, KvQuant::q4_1}, std::pair{GGML_TYPE_Q5_1, KvQuant::q5_1}}) {
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      const int n = 64;
      const std::vector<float> x = row(seed, n, 10.0f);
      const std::vector<float> k = row(seed + 1000, n, 3.0f);
      // ggml: the key stored by its reference quantizer, the query by the CPU's from_float.
      std::vector<uint8_t> key(ggml_row_size(key_type, n));
      ggml_quantize_chunk(key_type, k.data(), key.data(), 0, 1, n, nullptr);
      const auto* q8 = ggml_get_type_traits_cpu(GGML_TYPE_Q8_1);
      std::vector<uint8_t> query(ggml_row_size(GGML_TYPE_Q8_1, n));
      q8->from_float(x.data(), query.data(), n);
      float ggml_score = 0;
      ggml_get_type_traits_cpu(key_type)->vec_dot(n, &ggml_score, 0, key.data(), 0, query.data(), 0,
                                                  1);
      // The model: kvfuzz's dequantized key, the quantized query, the block sums' term.
      std::vector<float> dequantized(static_cast<size_t>(n));
      ggml_get_type_traits(key_type)->to_float(key.data(), dequantized.data(), n);
      std::vector<double> q(x.begin(), x.end());
      const QueryBlocks blocks = quantize_query_blocks(q.data(), q.size(), format);
      ASSERT_EQ(blocks.sum_error.size(), 2u);
      std::vector<double> minima(2);
      const std::vector<double> read_back(dequantized.begin(), dequantized.end());
      block_minima(read_back.data(), n, minima.data());
      double dot = 0, magnitude = 0;
      for (int i = 0; i < n; ++i) {
        dot += q[static_cast<size_t>(i)] * dequantized[static_cast<size_t>(i)];
        magnitude += std::fabs(q[static_cast<size_t>(i)] * dequantized[static_cast<size_t>(i)]);
      }
      const double sums = minima[0] * blocks.sum_error[0] + minima[1] * blocks.sum_error[1];
      worst_with = std::max(worst_with, std::fabs(ggml_score - (dot + sums)) / magnitude);
      worst_without = std::max(worst_without, std::fabs(ggml_score - dot) / magnitude);
    }
  }
  std::cout << "relative to sum |q k|: with the block sums " << worst_with << ", without "
            << worst_without << "\n";
  EXPECT_LT(worst_with, 1e-6);     // f32 arithmetic: a few units of 2^-24
  EXPECT_GT(worst_without, 1e-5);  // the term is not vacuous
}

// query_blocks_reach (a query quantized under RoPE): whatever ggml-cpu's q8_0 / q8_1
// quantizer makes of a row anywhere within [lo, hi], each value lies within its width of
// the reference's, and (q8_1) each block's sum error within sum_reach of the reference's;
// and the reach is not everything (at a few f32 ulps most rows cannot move at all).
TEST(GgmlQueryBlocks, TheReachOfARotatedQueryHoldsWhatGgmlMakesOfIt) {
  const int n = 64;
  for (const auto& [type, key] :
       {std::pair{GGML_TYPE_Q8_0, KvQuant::q8_0}, std::pair{GGML_TYPE_Q8_1, KvQuant::q4_1}}) {
    long outside = 0, moving_rows = 0, rows = 0;
    for (uint64_t seed = 1; seed <= 300; ++seed) {
      const std::vector<float> x = row(seed, n, 4.0f);
      const float relative = std::ldexp(1.0f, seed % 3 == 0 ? -22 : -12);
      std::vector<float> lo(x), hi(x);
      for (int i = 0; i < n; ++i) {
        const float e = std::fabs(x[static_cast<size_t>(i)]) * relative;
        lo[static_cast<size_t>(i)] -= e;
        hi[static_cast<size_t>(i)] += e;
      }
      std::vector<double> centre(x.begin(), x.end());
      const QueryBlocks model = quantize_query_blocks(centre.data(), n, key);
      const QueryReach reach = query_blocks_reach(lo.data(), hi.data(), centre.data(), n, key);
      rows += relative < 1e-6f;
      moving_rows += relative < 1e-6f && !reach.width.empty();
      uint64_t state = seed;
      for (int sample = 0; sample < 30; ++sample) {
        std::vector<float> moved(x);
        for (size_t i = 0; i < moved.size(); ++i) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          const int pick = sample < 2 ? sample : static_cast<int>(state >> 62);
          const float t = static_cast<float>(state >> 40) / 16777216.0f;
          moved[i] = pick == 0 ? lo[i] : pick == 1 ? hi[i] : lo[i] + t * (hi[i] - lo[i]);
        }
        const Quantized got = ggml_quantize(type, moved);
        for (size_t i = 0; i < moved.size(); ++i) {
          const double width = reach.width.empty() ? 0 : reach.width[i];
          outside += std::fabs(got.values[i] - centre[i]) > width;
        }
        if (type != GGML_TYPE_Q8_1) continue;
        for (size_t b = 0; b < got.sums.size(); ++b) {
          double sum = 0;
          for (size_t i = 32 * b; i < 32 * (b + 1); ++i) sum += got.values[i];
          const double error = got.sums[b] - sum;  // s - f16(d) sum of the quants
          const double allowed = reach.sum_reach.empty() ? 0 : reach.sum_reach[b];
          outside += std::fabs(error - model.sum_error[b]) > allowed + 1e-12 * std::fabs(sum);
        }
      }
    }
    std::cout << ggml_type_name(type) << ": " << moving_rows << " of " << rows
              << " rows at 2^-22 may move\n";
    EXPECT_EQ(outside, 0) << ggml_type_name(type);
    EXPECT_LT(moving_rows, rows / 4) << ggml_type_name(type);
  }
}

}  // namespace
}  // namespace kvfuzz
