#include "kvfuzz/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace kvfuzz {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "f32") return DType::f32;
  if (name == "f16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  return std::nullopt;
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Round to nearest even,
// overflow to Inf, gradual underflow to subnormals, NaN stays NaN (quiet).
uint16_t f32_to_f16(float value) {
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

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

float round_to_dtype(float value, DType dtype) {
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

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return std::ldexp(1.0, -24);
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
  }
  return 1.0;
}

double dtype_spacing(DType dtype, double magnitude) {
  int mantissa_bits = 23, min_exponent = -126;
  if (dtype == DType::f16) mantissa_bits = 10, min_exponent = -14;
  if (dtype == DType::bf16) mantissa_bits = 7;
  const double x = std::fabs(magnitude);
  const int exponent = x > 0 && std::isfinite(x) ? std::ilogb(x) : min_exponent;
  return std::ldexp(1.0, std::max(exponent, min_exponent) - mantissa_bits);
}

double dtype_min_normal(DType dtype) {
  return std::ldexp(1.0, dtype == DType::f16 ? -14 : -126);
}

float max_finite(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return std::numeric_limits<float>::max();
    case DType::f16:
      return 65504.0f;
    case DType::bf16:
      return bf16_to_f32(0x7F7Fu);
  }
  return 0;
}

}  // namespace kvfuzz
