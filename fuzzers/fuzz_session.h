// What every kvfuzz fuzz target shares: its settings (engine, artifact prefix, ...), how
// an input becomes a scenario, the cache-state extra counters, and what happens when a
// property fails (the fixture is written next to libFuzzer's artifact, then abort()).
//
// Settings come from the environment, so that libFuzzer's fork and jobs modes pass them
// to every child, or from flags that libFuzzer itself ignores (it skips "--" flags):
//
//   KVFUZZ_ENGINE=NAME  or --engine=NAME   engine under test (default contiguous; any
//                                          name of `kvfuzz list`, mutants included,
//                                          plugin:PATH[:NAME], exec:COMMAND, or
//                                          selftest-crash / selftest-hang)
//   KVFUZZ_EVENT_COUNTERS=0                 do not feed cache states to libFuzzer
//   KVFUZZ_EVENTS_DIR=DIR                   write cache-state totals to DIR/events-PID-START.json
//                                          every few seconds (read by kvfuzz campaign)
//   KVFUZZ_BYTES_ONLY=1                     choices past the input's bytes at their
//                                          lower bound instead of from a PRNG (measuring)
//   KVFUZZ_FULL_SIZE=1                      every input at the generator's default sizes,
//                                          whatever its length (fuzz_sizes.h; measuring)
//   KVFUZZ_DECODE_OUT=FILE                  only write the input's scenario as a fixture
//                                          and return (turns any artifact into a fixture)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::fuzz {

struct Settings {
  const EngineInfo* engine = nullptr;
  std::shared_ptr<const EngineInfo> engine_owner;  // a plugin or exec engine stays loaded
  EngineDeclarations declared;                     // what the engine announces and supports
  // The one generator's options for it (generator_options_from_declarations).
  GeneratorOptions generator;
  std::string artifact_prefix = "./";  // libFuzzer's -artifact_prefix=
  std::string events_dir;
  std::string decode_out;
  bool event_counters = true;
  bool bytes_only = false;  // KVFUZZ_BYTES_ONLY=1: no PRNG past the input's bytes
  bool full_size = false;   // KVFUZZ_FULL_SIZE=1: sizes not bounded by the input's length
};

// From LLVMFuzzerInitialize. An unknown engine prints one line and exits with status 2.
void initialize(int argc, char** argv);
const Settings& settings();

// Inputs that start with '{' are fixtures (so corpus/ seeds the targets as it is);
// anything else is bytes for the generator, at sizes that grow with the input's length
// (fuzz_sizes.h). Nothing when the input is a fixture that does
// not parse or is too large to judge within a fuzzing time limit.
std::optional<Scenario> decode_input(const uint8_t* data, size_t size);

// Sets the extra counters for the scenario's cache states and adds them to the totals.
void record_cache_states(const Scenario& scenario);

// When KVFUZZ_DECODE_OUT is set: writes the scenario there and returns true.
bool decode_only(const Scenario& scenario);

// The fixture first (<artifact_prefix>crash-<sha1 of the input>.json), then the report on
// stderr, then abort() so that libFuzzer records the crash.
[[noreturn]] void report_failure(const uint8_t* data, size_t size, Scenario scenario,
                                 Property property, const PropertyOutcome& outcome);

}  // namespace kvfuzz::fuzz
