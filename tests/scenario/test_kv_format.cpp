// The quantized KV formats' definitions on hand-derived values (kvfuzz/kv_format.h). The
// exhaustive bit-for-bit comparison with ml_dtypes and gguf is tests/python/test_kv_format.py;
// these run in every build, the optimised ones included.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "kvfuzz/kv_format.h"

namespace kvfuzz {
namespace {

TEST(Fp8, RoundsToNearestEvenAndSaturates) {
  constexpr KvQuant e4m3 = KvQuant::fp8_e4m3fn, e5m2 = KvQuant::fp8_e5m2;
  EXPECT_EQ(f32_to_fp8(16.0f, e4m3), 0x58);  // 1.0 * 2^4: exponent field 4 + 7
  EXPECT_EQ(f32_to_fp8(17.0f, e4m3), 0x58);  // the tie between 16 and 18 goes to 16 (even)
  EXPECT_EQ(f32_to_fp8(19.0f, e4m3), 0x5A);  // the tie between 18 and 20 goes to 20
  EXPECT_EQ(f32_to_fp8(-448.0f, e4m3), 0xFE);
  EXPECT_EQ(f32_to_fp8(1e9f, e4m3), 0x7E);  // saturates at 448
  EXPECT_EQ(f32_to_fp8(std::numeric_limits<float>::infinity(), e4m3), 0x7E);
  EXPECT_EQ(f32_to_fp8(std::nanf(""), e4m3), 0x7F);
  EXPECT_EQ(f32_to_fp8(0x1p-9f, e4m3), 0x01);   // the smallest subnormal
  EXPECT_EQ(f32_to_fp8(0x1p-10f, e4m3), 0x00);  // half of it: the tie goes to 0
  EXPECT_EQ(f32_to_fp8(-0.0f, e4m3), 0x80);
  EXPECT_EQ(f32_to_fp8(0x1.ep-7f, e4m3), 0x08);  // rounds up into the smallest normal, 2^-6
  EXPECT_EQ(f32_to_fp8(57344.0f, e5m2), 0x7B);
  EXPECT_EQ(f32_to_fp8(-1e9f, e5m2), 0xFB);
  EXPECT_EQ(fp8_to_f32(0x7C, e5m2), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7F, e4m3)));
  EXPECT_EQ(fp8_max(e4m3), 448.0f);
  EXPECT_EQ(fp8_max(e5m2), 57344.0f);
  for (int code = 0; code < 256; ++code) {  // every finite code converts back to itself
    const float x = fp8_to_f32(static_cast<uint8_t>(code), e4m3);
    if (std::isfinite(x)) {
      EXPECT_EQ(f32_to_fp8(x, e4m3), code) << code;
    }
  }
}

TEST(Fp8, AScaleDividesOnTheWayInAndMultipliesOnTheWayOut) {
  const KvFormat format{KvQuant::fp8_e4m3fn, {0.25, 2.0}};
  const std::vector<float> x{33.0f};
  float out = 0;
  round_trip_row(format, DType::f32, 0, x.data(), 1, &out);
  EXPECT_EQ(out, 32.0f);  // 132 lies between 128 and 144: 128, times 0.25
  round_trip_row(format, DType::f32, 1, x.data(), 1, &out);
  EXPECT_EQ(out, 32.0f);  // 16.5 between 16 and 18: 16, times 2
  EXPECT_EQ(row_bytes(KvFormat{KvQuant::fp8_e5m2, {}}, 7), 7u);
}

TEST(GgmlBlocks, Q8_0AndQ4_0StoreTheirBlocksAsGgmlDoes) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = -127.0f;
  x[2] = 0.5f;   // roundf: away from zero, 1
  x[3] = -1.5f;  // -2
  std::vector<uint8_t> bytes(row_bytes(KvFormat{KvQuant::q8_0, {}}, 32));
  ASSERT_EQ(bytes.size(), 34u);
  encode_row(KvFormat{KvQuant::q8_0, {}}, DType::f32, 0, x.data(), 32, bytes.data());
  EXPECT_EQ(bytes[0], 0x00);  // d = 127 / 127 = 1: f16 0x3C00, little-endian
  EXPECT_EQ(bytes[1], 0x3C);
  EXPECT_EQ(bytes[2], 0x7F);
  EXPECT_EQ(bytes[3], 0x81);
  EXPECT_EQ(bytes[4], 0x01);
  EXPECT_EQ(bytes[5], 0xFE);

  // q4_0: d = (the largest-magnitude element, signed) / -8 = 1; x -> nibble x + 8, element
  // j in the low nibble of byte j, element j + 16 in the high one.
  std::vector<float> y(32);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(j < 16 ? j - 8 : 7 - (j - 16));
  std::vector<uint8_t> q4(row_bytes(KvFormat{KvQuant::q4_0, {}}, 32));
  ASSERT_EQ(q4.size(), 18u);
  encode_row(KvFormat{KvQuant::q4_0, {}}, DType::f32, 0, y.data(), 32, q4.data());
  EXPECT_EQ(q4[2], 0xF0);   // element 0: -8 -> 0 (low); element 16: 7 -> 15 (high)
  EXPECT_EQ(q4[17], 0x0F);  // element 15: 7 -> 15; element 31: -8 -> 0
  std::vector<float> back(32);
  decode_row(KvFormat{KvQuant::q4_0, {}}, 0, q4.data(), 32, back.data());
  EXPECT_EQ(back, y);
}

TEST(GgmlBlocks, EveryFormatReadsBackWithinItsStep) {
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = std::sin(0.37f * static_cast<float>(j)) * 3.0f;
  for (const KvQuant quant :
       {KvQuant::q8_0, KvQuant::q4_0, KvQuant::q4_1, KvQuant::q5_0, KvQuant::q5_1}) {
    std::vector<float> back(64);
    round_trip_row(KvFormat{quant, {}}, DType::f32, 0, x.data(), 64, back.data());
    const int levels = quant == KvQuant::q8_0                               ? 254
                       : (quant == KvQuant::q4_0 || quant == KvQuant::q4_1) ? 15
                                                                            : 31;
    for (int j = 0; j < 64; ++j) {
      EXPECT_LE(std::fabs(back[j] - x[j]), 6.0 / levels + 1e-3) << kv_quant_name(quant) << " " << j;
    }
    EXPECT_EQ(parse_kv_quant(kv_quant_name(quant)), quant);
  }
}

// MLX's affine quantizer on hand-derived groups (mlx/backend/cpu/quantized.cpp, quantize).
TEST(AffineGroups, TheLargerExtremeIsTheBiasAndQuantsPackLowBitsFirst) {
  // affine4, group 32: min -8, max 7; |min| > |max|, so the scale (7 + 8) / 15 = 1 stays
  // positive and the edge is -8: q0 = -8, scale -8 / -8 = 1, bias -8, q = x + 8.
  std::vector<float> x(32, 0.0f);
  for (int j = 0; j < 16; ++j) x[j] = static_cast<float>(j - 8);
  const KvFormat a4{KvQuant::affine4, {}, 32};
  std::vector<uint8_t> bytes(row_bytes(a4, 32));
  ASSERT_EQ(bytes.size(), 8u + 16u);  // f32 scale, f32 bias, 32 nibbles
  encode_row(a4, DType::f32, 0, x.data(), 32, bytes.data());
  const std::vector<uint8_t> header{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC1};  // 1, -8
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8), header);
  // Element k of a little-endian word in bits 4k: the first word holds q = 0..7, 0x76543210.
  EXPECT_EQ(bytes[8], 0x10);
  EXPECT_EQ(bytes[11], 0x76);
  EXPECT_EQ(bytes[16], 0x88);  // elements 16 and 17: x = 0, q = 8
  std::vector<float> back(32);
  decode_row(a4, 0, bytes.data(), 32, back.data());
  EXPECT_EQ(back, x);

  // affine2, group 32, x in [0, 3]: |max| wins, so scale -1, bias 3, q = rint(3 - x) with
  // ties to even, read back as -q + 3.
  std::vector<float> y(32, 0.0f);
  y[0] = 3.0f;
  y[1] = 1.4f;  // q = rint(1.6) = 2: 1
  y[2] = 1.5f;  // q = rint(1.5) = 2 (even): 1
  y[3] = 2.5f;  // q = rint(0.5) = 0 (even): 3
  const KvFormat a2{KvQuant::affine2, {}, 32};
  round_trip_row(a2, DType::f32, 0, y.data(), 32, back.data());
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], 1.0f);
  EXPECT_EQ(back[3], 3.0f);
  EXPECT_EQ(back[4], 0.0f);
  EXPECT_EQ(row_bytes(KvFormat{KvQuant::affine8, {}, 64}, 128), 2u * (8u + 64u));
}

TEST(AffineGroups, TheScaleAndBiasAreStoredInTheLayoutsDtype) {
  // A constant group: the scale is the 1e-7 floor, the edge 0.1 is the bias and every q is
  // 0, so each element reads back as the bias in the dtype.
  const std::vector<float> x(32, 0.1f);
  std::vector<float> back(32);
  const KvFormat a8{KvQuant::affine8, {}, 32};
  round_trip_row(a8, DType::f32, 0, x.data(), 32, back.data());
  EXPECT_EQ(back[5], 0.1f);
  round_trip_row(a8, DType::f16, 0, x.data(), 32, back.data());
  EXPECT_EQ(back[5], 0.0999755859375f);
  round_trip_row(a8, DType::bf16, 0, x.data(), 32, back.data());
  EXPECT_EQ(back[5], 0.10009765625f);
  EXPECT_EQ(parse_kv_quant("affine8"), KvQuant::affine8);
  EXPECT_EQ(affine_bits(KvQuant::affine2), 2);
  EXPECT_FALSE(is_ggml_block(KvQuant::affine4));
}

// round_trip_reach: whatever an engine's rounding makes of a block (or an affine group)
// within [lo, hi], what it reads back lies within the reach; a block with one input reads
// back as round_trip_row's; and the reach is not everything (most elements of a slightly
// perturbed block are exact).
TEST(GgmlBlocks, TheReachHoldsEveryRoundTripOfItsInputs) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const KvQuant formats[] = {KvQuant::q8_0,    KvQuant::q4_0,    KvQuant::q4_1,
                             KvQuant::q5_0,    KvQuant::q5_1,    KvQuant::fp8_e4m3fn,
                             KvQuant::affine2, KvQuant::affine4, KvQuant::affine8};
  constexpr int n = 64;
  for (const KvQuant quant : formats) {
    // The affine formats in groups of 32 and their scale and bias stored in bf16 (MLX's
    // in a bf16 model); the others in f32.
    const KvFormat format{quant, {}, is_affine(quant) ? 32 : 0};
    const DType dtype = is_affine(quant) ? DType::bf16 : DType::f32;
    long outside = 0;
    std::array<long, 5> wide{};  // by the reach's exponent, -24 + 4 k
    const long per_reach = 300 / 5 * n;
    for (int trial = 0; trial < 300; ++trial) {
      // Magnitudes of several scales, some elements tied in magnitude with opposite signs
      // (q4_0's signed extreme), reaches from 2^-24 to 2^-8 of each element.
      const float magnitude = std::ldexp(1.0f, trial % 9 - 4);
      const float relative = std::ldexp(1.0f, -24 + (trial % 5) * 4);
      std::vector<float> lo(n), hi(n), out_lo(n), out_hi(n), x(n), back(n);
      for (int i = 0; i < n; ++i) {
        const float v = (trial % 7 == 0 && i == 5) ? -lo[0] : magnitude * unit(random);
        const float e = std::fabs(v) * relative;
        lo[static_cast<size_t>(i)] = v - e;
        hi[static_cast<size_t>(i)] = v + e;
      }
      round_trip_reach(format, dtype, 0, lo.data(), hi.data(), n, out_lo.data(), out_hi.data());
      for (int sample = 0; sample < 40; ++sample) {
        for (size_t i = 0; i < n; ++i) {
          const int pick = sample < 3 ? sample : static_cast<int>(random() % 3);
          const float t = (unit(random) + 1) / 2;
          x[i] = pick == 0 ? lo[i] : pick == 1 ? hi[i] : lo[i] + t * (hi[i] - lo[i]);
        }
        round_trip_row(format, dtype, 0, x.data(), n, back.data());
        for (size_t i = 0; i < n; ++i) {
          outside += back[i] < out_lo[i] || back[i] > out_hi[i];
        }
      }
      for (size_t i = 0; i < n; ++i) wide[static_cast<size_t>(trial % 5)] += out_hi[i] > out_lo[i];
      // One input: exactly its round trip.
      round_trip_reach(format, dtype, 0, lo.data(), lo.data(), n, out_lo.data(), out_hi.data());
      round_trip_row(format, dtype, 0, lo.data(), n, back.data());
      EXPECT_EQ(out_lo, back) << kv_quant_name(quant);
      EXPECT_EQ(out_hi, back) << kv_quant_name(quant);
    }
    EXPECT_EQ(outside, 0) << kv_quant_name(quant);
    // A reach of a few f32 ulps (an engine that rotates with exact angles: 4 * 2^-24) leaves
    // all but a few elements exact; 2^-8 of each element (a quarter of a q8_0 step at the
    // block's largest) makes many blocks' f16 scale and many quants ambiguous.
    for (size_t k = 0; k < wide.size(); ++k) {
      std::cout << kv_quant_name(quant) << ", reach 2^" << -24 + 4 * static_cast<int>(k) << ": "
                << wide[k] << " of " << per_reach << " elements may read back as more than one\n";
    }
    EXPECT_LT(wide[0], per_reach / 100) << kv_quant_name(quant);
    EXPECT_LT(wide[1], per_reach / 20) << kv_quant_name(quant);
  }
}

// q4_0's d = M / -8 takes the sign of M, the *first* element of largest magnitude. Two
// elements tied exactly in magnitude with opposite signs (rotated small integers rounded to
// f16: 4.06375 and -4.06381 both become 4.0625) leave M one sign, so another element's
// ambiguity (here element 0's f16 rounding) does not make every quant of the block
// ambiguous; an element that may exceed both makes either sign possible.
TEST(GgmlBlocks, TheFirstOfTwoTiedExtremesGivesTheBlockItsSign) {
  std::vector<float> lo(32, 1.0f), hi(32, 1.0f), out_lo(32), out_hi(32), back(32);
  lo[5] = hi[5] = 4.0625f;
  lo[17] = hi[17] = -4.0625f;
  lo[0] = -3.947265625f;
  hi[0] = -3.9453125f;
  const KvFormat q4_0{KvQuant::q4_0, {}, 0};
  round_trip_reach(q4_0, DType::f32, 0, lo.data(), hi.data(), 32, out_lo.data(), out_hi.data());
  round_trip_row(q4_0, DType::f32, 0, lo.data(), 32, back.data());
  EXPECT_EQ(out_lo, back);  // M = +4.0625 whichever element 0 is: d = -0.5078125
  EXPECT_EQ(out_hi, back);
  EXPECT_EQ(back[0], -3.5546875f);  // clamped to quant 15: 7 d
  // Element 0 may reach -4.07 (beyond both): M may be negative, and element 0 reads back as
  // -4.0625 or -3.5546875 (and more) as the sign goes.
  lo[0] = -4.0703125f;
  round_trip_reach(q4_0, DType::f32, 0, lo.data(), hi.data(), 32, out_lo.data(), out_hi.data());
  EXPECT_LE(out_lo[0], -4.0625f);
  EXPECT_GE(out_hi[0], -3.5546875f);
  EXPECT_LT(out_lo[1], out_hi[1]);
}

// An element on a quant's rounding boundary is seen: q8_0 with amax 127 (d = 1) holds 0.5
// as 1 (roundf) and anything just below it as 0.
TEST(GgmlBlocks, TheReachOfAnElementOnABoundaryIsBothSides) {
  std::vector<float> lo(32, 0.0f), hi(32, 0.0f), out_lo(32), out_hi(32);
  lo[0] = hi[0] = 127.0f;
  lo[1] = std::nextafter(0.5f, 0.0f);
  hi[1] = 0.5f;
  round_trip_reach(KvFormat{KvQuant::q8_0, {}, 0}, DType::f32, 0, lo.data(), hi.data(), 32,
                   out_lo.data(), out_hi.data());
  EXPECT_EQ(out_lo[1], 0.0f);
  EXPECT_EQ(out_hi[1], 1.0f);
  EXPECT_EQ(out_lo[0], 127.0f);
  EXPECT_EQ(out_hi[0], 127.0f);
  EXPECT_EQ(out_lo[2], 0.0f);
  EXPECT_EQ(out_hi[2], 0.0f);
  // affine4, group 32: 0 and 15 the extremes (the edge 15, scale -1, snapped: q0 = -15,
  // bias 15, q = rint(15 - x)): 7.5 reads back as 7 (rint(7.5) = 8, ties to even), anything
  // just above it as 8.
  std::vector<float> a_lo(32, 1.0f), a_hi(32, 1.0f);
  a_lo[0] = a_hi[0] = 0.0f;
  a_lo[1] = a_hi[1] = 15.0f;
  a_lo[2] = 7.5f;
  a_hi[2] = std::nextafter(7.5f, 8.0f);
  round_trip_reach(KvFormat{KvQuant::affine4, {}, 32}, DType::f32, 0, a_lo.data(), a_hi.data(), 32,
                   out_lo.data(), out_hi.data());
  EXPECT_EQ(out_lo[2], 7.0f);
  EXPECT_EQ(out_hi[2], 8.0f);
  EXPECT_EQ(out_lo[3], 1.0f);
  EXPECT_EQ(out_hi[3], 1.0f);
}

}  // namespace
}  // namespace kvfuzz

namespace kvfuzz {
namespace {

// A NaN or infinite element (a poisoned or overflowed row) is stored without undefined
// behaviour (its quant clamped as fmax makes a NaN: the low end; UBSan checks the
// conversions), and only its own block or group is touched.
TEST(KvFormats, NaNAndInfiniteElementsAreStoredAndTouchOnlyTheirBlock) {
  for (const KvQuant quant : kQuantizedFormats) {
    const KvFormat format{quant, is_fp8(quant) ? std::vector<double>{0.5} : std::vector<double>{},
                          is_affine(quant) ? 32 : 0};
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x(64), out(64), second(32);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
      x[3] = bad;
      round_trip_row(format, DType::f32, 0, x.data(), 64, out.data());
      round_trip_row(format, DType::f32, 0, x.data() + 32, 32, second.data());
      for (size_t i = 0; i < 32; ++i) {
        EXPECT_EQ(out[32 + i], second[i]) << kv_quant_name(quant) << " element " << 32 + i;
      }
    }
  }
}

}  // namespace
}  // namespace kvfuzz
