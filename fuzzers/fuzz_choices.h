// libFuzzer's bytes as generator choices: the one generator (kvfuzz/generator.h) reads
// its choices from a FuzzedDataProvider, so a mutation of the input is a mutation of the
// scenario. When the bytes run out, the remaining choices come from the project's PRNG
// seeded with a hash of the whole input: a short input is then still a full random
// scenario (the PRNG-driven generator rejects every mutant within a few cases, while
// "every choice at its lower bound" would leave libFuzzer to grow inputs byte by byte
// before a second op appears), and any mutation of it gives another one. Deterministic:
// the same bytes give the same scenario on every machine. `bytes_only` turns the PRNG off
// (every choice past the bytes at its lower bound): KVFUZZ_BYTES_ONLY=1, for measuring
// how much libFuzzer's guidance does on its own (docs/BENCHMARKS.md).
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/prng.h"
#include "support/hash.h"

namespace kvfuzz::fuzz {

class FuzzedChoiceSource final : public ChoiceSource {
 public:
  FuzzedChoiceSource(const uint8_t* data, size_t size, bool bytes_only = false)
      : bytes_(data, size),
        rest_(fnv1a(std::span<const unsigned char>(data, size))),
        bytes_only_(bytes_only) {}
  int64_t pick(int64_t lo, int64_t hi) override {
    if (bytes_.remaining_bytes() > 0) return bytes_.ConsumeIntegralInRange<int64_t>(lo, hi);
    return bytes_only_ ? lo : rest_.between(lo, hi);
  }

 private:
  FuzzedDataProvider bytes_;
  Xoshiro256 rest_;
  bool bytes_only_;
};

}  // namespace kvfuzz::fuzz
