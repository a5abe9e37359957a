// One libFuzzer target per property (fuzzers/CMakeLists.txt compiles this file once for
// each, with KVFUZZ_FUZZ_PROPERTY set to its name): decode the input into a scenario,
// judge it with the one case judge (CaseJudge) that `kvfuzz check`, the engine tests and the
// RapidCheck suites use, and crash on a failure, after writing the fixture (fuzz_session.h).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "fuzz_session.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"

namespace {

kvfuzz::Property g_property = kvfuzz::Property::prefix;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  kvfuzz::fuzz::initialize(*argc, *argv);
  g_property = *kvfuzz::parse_property(KVFUZZ_FUZZ_PROPERTY);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<kvfuzz::Scenario> scenario = kvfuzz::fuzz::decode_input(data, size);
  if (!scenario) return -1;  // a fixture that does not parse: not worth keeping
  if (kvfuzz::fuzz::decode_only(*scenario)) return 0;
  kvfuzz::fuzz::record_cache_states(*scenario);
  const kvfuzz::fuzz::Settings& settings = kvfuzz::fuzz::settings();
  kvfuzz::CaseJudge judge(std::move(*scenario));
  const kvfuzz::CaseVerdict verdict =
      judge.judge({&g_property, 1}, *settings.engine, settings.declared);
  if (verdict.skipped) return -1;  // outside the engine's declarations: not worth keeping
  const kvfuzz::PropertyOutcome outcome = verdict.outcome(g_property);
  if (!outcome.pass) {
    kvfuzz::fuzz::report_failure(data, size, judge.scenario(), g_property, outcome);
  }
  return 0;
}
