#include "kvfuzz/prng.h"

#include <cmath>

namespace kvfuzz {

// Every mapping uses the high bits (the best-mixed ones of xoshiro256**) and exact
// integer arithmetic; the only float operations are conversions of small integers and
// scalings by powers of two (a multiplication by 2^-k, or ldexp), which are exact and
// identical on every IEEE machine.

float small_int_from_bits(uint64_t bits) {
  return static_cast<float>(static_cast<int>((bits >> 32) % 9u) - 4);
}

float dyadic_from_bits(uint64_t bits) {
  return static_cast<float>(static_cast<int>((bits >> 32) % 65u) - 32) * 0x1p-3f;
}

float wide_from_bits(uint64_t bits) {
  const auto mantissa = static_cast<int>(bits & 0x3FFu);           // 10 bits
  const int exponent = static_cast<int>((bits >> 32) % 25u) - 12;  // [-12, 12]
  const float magnitude = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 10);
  return (bits >> 63) ? -magnitude : magnitude;
}

}  // namespace kvfuzz
