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
