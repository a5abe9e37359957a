// Hostile input for the fixture parser and loader: any bytes must either parse into a
// scenario that passes validate() and survives a canonical round trip, or be rejected
// with one FixtureError line that names the input and a JSON path. Anything else (a
// crash, a sanitizer report, another exception, an error spanning lines, a round trip
// that changes the scenario) aborts, so libFuzzer records it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kvfuzz/fixture_io.h"
#include "kvfuzz/scenario.h"

namespace {

constexpr std::string_view kOrigin = "fuzz-input.json";

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "kvfuzz fuzz_fixture: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvfuzz::Scenario scenario;
  try {
    scenario = kvfuzz::parse_fixture(text, kOrigin);
  } catch (const kvfuzz::FixtureError& e) {
    const std::string message = e.what();
    // The promise of docs/fixture-format.md: one line, "FILE: $.path: expected ..., got".
    if (!message.starts_with(std::string(kOrigin) + ": ")) fail("error without the file", message);
    if (message.find('\n') != std::string::npos) fail("error spanning lines", message);
    if (message.size() <= kOrigin.size() + 2) fail("empty error", message);
    return -1;
  }
  const std::string canonical = kvfuzz::write_fixture(scenario);
  kvfuzz::Scenario again;
  try {
    again = kvfuzz::parse_fixture(canonical, "canonical");
  } catch (const kvfuzz::FixtureError& e) {
    fail("the canonical form of an accepted fixture does not parse", e.what());
  }
  if (!(again == scenario)) fail("round trip changed the scenario", canonical.substr(0, 200));
  if (kvfuzz::write_fixture(again) != canonical) fail("canonical form not stable", canonical);
  return 0;
}
