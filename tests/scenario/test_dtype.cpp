// Software f16/bf16 conversions: exactness, round-to-nearest-even, specials, subnormals.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "kvfuzz/dtype.h"

namespace kvfuzz {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_FALSE(parse_dtype("fp16").has_value());
}

TEST(DType, SmallIntegersAndDyadicsAreExactInEveryDtype) {
  for (int i = -64; i <= 64; ++i) {
    const float x = static_cast<float>(i) / 8.0f;
    EXPECT_EQ(f16_to_f32(f32_to_f16(x)), x);
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(x)), x);
  }
}

TEST(DType, F16KnownEncodings) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // halfway to 2^16 rounds to even: Inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // halfway, ties to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);  // above halfway
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
}

TEST(DType, F16RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties to even (1 + 2^-9).
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  // Rounding that carries into the exponent: 2047/1024 + tiny rounds up to 2.
  EXPECT_EQ(f16_to_f32(f32_to_f16(2.0f - std::ldexp(1.0f, -12))), 2.0f);
}

TEST(DType, F16RoundTripsEveryFiniteHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7C00) == 0x7C00) continue;  // Inf/NaN
    EXPECT_EQ(f32_to_f16(f16_to_f32(h)), h) << std::hex << bits;
  }
}

// An independent decoding of every finite half (the formula of IEEE 754 in double), against
// the inline conversion: subnormals and zeros included, which take their own path.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

TEST(DType, F16DecodesEveryFiniteHalfToItsExactValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7C00) == 0x7C00) continue;  // Inf/NaN
    const float got = f16_to_f32(h);
    EXPECT_EQ(static_cast<double>(got), half_value(h)) << std::hex << bits;
    EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << bits;
  }
}

TEST(DType, F16RoundsEveryMidpointBetweenFiniteHalvesToEven) {
  // The midpoint of two neighbouring positive halves (exact in f32) goes to the one whose
  // last bit is 0; a hair above or below it goes to the nearer one.
  for (uint32_t bits = 0; bits < 0x7BFF; ++bits) {
    const auto lo = static_cast<uint16_t>(bits), hi = static_cast<uint16_t>(bits + 1);
    const auto mid = static_cast<float>((half_value(lo) + half_value(hi)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (half_value(lo) + half_value(hi)) / 2);
    EXPECT_EQ(f32_to_f16(mid), (lo & 1) == 0 ? lo : hi) << std::hex << bits;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), lo) << std::hex << bits;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), hi) << std::hex << bits;
    EXPECT_EQ(f32_to_f16(-mid), static_cast<uint16_t>(0x8000 | f32_to_f16(mid)));
  }
}

TEST(DType, RoundingErrorIsWithinUnitRoundoff) {
  for (int i = 1; i < 5000; ++i) {
    const float x = 1.0f + static_cast<float>(i) * 0.000731f;
    for (DType d : {DType::f16, DType::bf16}) {
      EXPECT_LE(std::abs(round_to_dtype(x, d) - x), unit_roundoff(d) * x) << x;
    }
  }
}

TEST(DType, Bf16KnownEncodings) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-std::numeric_limits<float>::infinity())),
            -std::numeric_limits<float>::infinity());
  EXPECT_EQ(max_finite(DType::bf16), std::bit_cast<float>(0x7F7F0000u));
}

}  // namespace
}  // namespace kvfuzz
