// Storage dtypes and their software conversions.
//
// Engines store K/V in f32, f16 or bf16; the reference models the same rounding of its
// inputs. The conversions are written by hand (round to nearest, ties to even) so that
// they are bit-identical under every compiler and need no hardware support.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvfuzz {

enum class DType { f32, f16, bf16 };

std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);

// The conversions are inline: the engines and the reference convert every element they
// read or write, and a call per element was half of an f16 engine's time.
// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Round to nearest even,
// overflow to Inf, gradual underflow to subnormals, NaN stays NaN (quiet).
inline uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  }
  const int exponent = static_cast<int>(abs >> 23) - 127;
  if (exponent > 15) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow
  uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;                // implicit 1
  int shift;                                                        // bits to drop
  uint32_t half_exponent;
  if (exponent >= -14) {
    shift = 13;
    half_exponent = static_cast<uint32_t>(exponent + 15);
  } else {
    if (abs == 0) return sign;
    shift = 13 + (-14 - exponent);
    if (shift > 24) return sign;  // below half the smallest subnormal: rounds to zero
    half_exponent = 0;
  }
  const uint32_t kept = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  uint32_t result = (half_exponent << 10) + (half_exponent ? (kept & 0x3FFu) : kept);
  if (rest > halfway || (rest == halfway && (kept & 1u))) ++result;  // carries into exponent
  return static_cast<uint16_t>(sign | result);
}

inline float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// The value a float becomes after a round trip through `dtype` storage.
inline float round_to_dtype(float value, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return value;
    case DType::f16:
      return f16_to_f32(f32_to_f16(value));
    case DType::bf16:
      return bf16_to_f32(f32_to_bf16(value));
  }
  return value;
}

// Unit roundoff u of the dtype: |round(x) - x| <= u |x| for normal x.
double unit_roundoff(DType dtype);

// The distance between consecutive values of the dtype around |magnitude|: the ulp of its
// binade, or the subnormal spacing below the smallest normal. A round to nearest moves a
// value by at most half of it.
double dtype_spacing(DType dtype, double magnitude);

// The smallest positive normal value of the dtype (below it, values are subnormal).
double dtype_min_normal(DType dtype);

// Largest finite value of the dtype (used as the "huge" poison).
float max_finite(DType dtype);

}  // namespace kvfuzz
