// Storage dtypes and their software conversions.
//
// Engines store K/V in f32, f16 or bf16; the reference models the same rounding of its
// inputs. The conversions are written by hand (round to nearest, ties to even) so that
// they are bit-identical under every compiler and need no hardware support.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvfuzz {

enum class DType { f32, f16, bf16 };

std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);

uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t bits);

// The value a float becomes after a round trip through `dtype` storage.
float round_to_dtype(float value, DType dtype);

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
