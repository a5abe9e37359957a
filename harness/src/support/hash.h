// FNV-1a, 64 bits: the one hash of kvfuzz, for fixture names (corpus/fixture_names.h),
// the identity of a scenario's variants (judge/property_variants.cpp), the shrinker's seen
// candidates (shrink/search.cpp) and libFuzzer inputs as a PRNG seed
// (fuzzers/fuzz_choices.h). Not cryptographic; chosen because it is tiny, byte-order
// independent and the same on every machine, so the same bytes give the same fixture name
// and the same scenario everywhere.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kvfuzz {

class Fnv1a {
 public:
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ull;
  static constexpr uint64_t kPrime = 0x100000001b3ull;

  constexpr void add(unsigned char byte) { hash_ = (hash_ ^ byte) * kPrime; }
  constexpr void add(std::string_view bytes) {
    for (const char c : bytes) add(static_cast<unsigned char>(c));
  }
  constexpr void add(std::span<const unsigned char> bytes) {
    for (const unsigned char byte : bytes) add(byte);
  }
  // `x` as its 8 bytes, least significant first.
  constexpr void add_u64(uint64_t x) {
    for (int i = 0; i < 8; ++i) add(static_cast<unsigned char>(x >> (8 * i)));
  }
  constexpr uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = kOffsetBasis;
};

constexpr uint64_t fnv1a(std::string_view bytes) {
  Fnv1a hash;
  hash.add(bytes);
  return hash.value();
}

constexpr uint64_t fnv1a(std::span<const unsigned char> bytes) {
  Fnv1a hash;
  hash.add(bytes);
  return hash.value();
}

}  // namespace kvfuzz
