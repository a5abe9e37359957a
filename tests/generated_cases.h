// How many generated cases an honest engine's pass-everything test runs in this build.
//
// The default build runs them all: it is the build for behaviour and counts. Under ASan +
// UBSan a fifth (at least one): there the run is for memory and undefined behaviour, which
// the first cases already take through the same code, at about ten times the cost each.
// scripts/test.sh --long sets KVFUZZ_TEST_LONG=1, and every build runs them all.
//
// Only for tests where every case must pass. A test that shows a mutant dies keeps its
// cases in every build: fewer cases could let the mutant live.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace kvfuzz::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline uint64_t generated_cases(uint64_t all) {
  const char* long_runs = std::getenv("KVFUZZ_TEST_LONG");
  if (!kSanitized || (long_runs && std::string_view(long_runs) == "1")) return all;
  return all / 5 > 0 ? all / 5 : 1;
}

}  // namespace kvfuzz::test
