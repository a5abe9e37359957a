// Environment overrides of the options, read when the tests are registered, so that one
// build runs a quick suite under ctest and a long one on demand:
//   KVFUZZ_CASES=100000 KVFUZZ_SEED=7 ctest -R Properties
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kvfuzz/engine_tests.h"

namespace kvfuzz {

namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// A decimal unsigned integer and nothing else: no sign, no spaces, no wrap-around.
uint64_t parse_unsigned(const char* name, const char* text, uint64_t max) {
  const std::string s(text);
  const auto bad = [&] {
    return std::invalid_argument(std::string(name) + ": expected a decimal integer up to " +
                                 std::to_string(max) + ", got '" + s + "'");
  };
  if (s.find_first_not_of("0123456789") != std::string::npos) throw bad();
  errno = 0;
  const unsigned long long value = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE || value > max) throw bad();
  return value;
}

double parse_seconds(const char* name, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !(value >= 0)) {
    throw std::invalid_argument(std::string(name) + ": expected a number of seconds >= 0, got '" +
                                text + "'");
  }
  return value;
}

}  // namespace

EngineTestOptions with_environment(EngineTestOptions options) {
  if (const char* text = variable("KVFUZZ_CASES")) {
    options.cases = static_cast<int>(parse_unsigned("KVFUZZ_CASES", text, 100000000));
    if (options.cases < 1) throw std::invalid_argument("KVFUZZ_CASES: expected at least 1 case");
  }
  if (const char* text = variable("KVFUZZ_SEED")) {
    options.seed = parse_unsigned("KVFUZZ_SEED", text, UINT64_MAX);
  }
  if (const char* text = variable("KVFUZZ_FAILURES_DIR")) options.failures_dir = text;
  if (const char* text = variable("KVFUZZ_SHRINK_SECONDS")) {
    options.shrink_seconds = parse_seconds("KVFUZZ_SHRINK_SECONDS", text);
  }
  return options;
}

}  // namespace kvfuzz
