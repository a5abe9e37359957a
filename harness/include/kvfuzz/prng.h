// The project's own PRNG and integer-to-float mappings.
//
// Anything that makes a fixture must be bit-identical on every machine and compiler, so
// the standard library's distributions (whose output differs between implementations)
// are never used. splitmix64 seeds xoshiro256**; every float mapping below is exact
// integer arithmetic followed by an exact scaling by a power of two.
#pragma once

#include <cstdint>

namespace kvfuzz {

constexpr uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Xoshiro256 {
 public:
  explicit constexpr Xoshiro256(uint64_t seed) {
    uint64_t sm = seed;
    for (auto& word : s_) word = splitmix64(sm);
  }

  constexpr uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform integer in [0, bound), bound >= 1; unbiased by rejection.
  constexpr uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x = next();
    while (x >= limit) x = next();
    return x % bound;
  }

  // Uniform integer in [lo, hi], lo <= hi.
  constexpr int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4]{};
};

// Integer-to-float mappings used by generated token data. Each is exact in f32.
// small-int: integers in [-4, 4] (exact in every dtype).
float small_int_from_bits(uint64_t bits);
// dyadic: multiples of 1/8 in [-4, 4] (exact in every dtype).
float dyadic_from_bits(uint64_t bits);
// uniform: multiples of 2^-23 in [-1, 1) (exact in f32, rounded in f16/bf16). Inline: the
// model level's tolerance draws millions a check (harness/src/model/reference_forward.cpp).
inline float uniform_from_bits(uint64_t bits) {
  const auto mantissa = static_cast<int32_t>(bits >> 40);  // 24 bits: [0, 2^24)
  return static_cast<float>(mantissa - (1 << 23)) * 0x1p-23f;
}
// wide: +-(1 + m/1024) * 2^e with e in [-12, 12]: wide dynamic range, exact in f32.
float wide_from_bits(uint64_t bits);

}  // namespace kvfuzz
