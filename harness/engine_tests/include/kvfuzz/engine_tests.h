// GoogleTest tests for a user's engine: the door that kvfuzz_add_engine_tests() (the
// installed CMake package, docs/writing-an-engine.md) opens for C++ engines.
//
// register_engine_tests() registers, for one engine:
//
//   Properties.<property>   one test per property of property.h; each judges `cases`
//                           generated scenarios (generate_scenario over a PRNG seeded per
//                           case), leaving out the optional operations the engine does not
//                           announce (probe_capabilities)
//   Corpus.<stem>           one test per fixture of `corpus`: replayed as `kvfuzz replay`
//                           does; skipped, naming the capability, when the fixture uses an
//                           operation the engine does not announce
//   KvfuzzCorpus.<stem>     the same for `kvfuzz_corpus` (kvfuzz's own shipped fixtures)
//
// A failing test shrinks its scenario (kvfuzz/shrink.h), writes the shrunk fixture into
// `failures_dir` (the raw failing scenario into failures_dir/raw first) and fails with the
// report, the fixture's path and the `kvfuzz replay` and `explain` commands on the engine. Call it
// after testing::InitGoogleTest() and before RUN_ALL_TESTS().
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {

struct EngineTestOptions {
  int cases = 100;    // scenarios per property; KVFUZZ_CASES overrides
  uint64_t seed = 1;  // the run's seed, case i gets its own derived seed; KVFUZZ_SEED overrides
  // Fixture files or directories (every *.json below, sorted): one Corpus test each.
  std::vector<std::filesystem::path> corpus;
  // kvfuzz's own corpus (share/kvfuzz/corpus of the package): one KvfuzzCorpus test each.
  std::vector<std::filesystem::path> kvfuzz_corpus;
  // Where failing tests leave their shrunk fixtures; KVFUZZ_FAILURES_DIR overrides.
  std::filesystem::path failures_dir = "kvfuzz-failures";
  // The shrinker's time budget per failure; KVFUZZ_SHRINK_SECONDS overrides.
  double shrink_seconds = 30;
  // The kvfuzz command that failure messages tell a person to run.
  std::string kvfuzz_command = "kvfuzz";
  // The engine under test as that command's --engine takes it ("plugin:/path/libx.so",
  // from kvfuzz_add_engine_plugin), for the replay and explain commands of failure
  // messages; "" when the engine is not reachable from the command line.
  std::string engine_spec;
  // Sizes of the generated scenarios and the engine edges they aim at (`edges`: the
  // defaults are kvfuzz's flash engine's; an engine with other tiles sets its own);
  // `truncate` and `fork` are replaced by what the engine announces.
  GeneratorOptions generator;
};

// `options` with KVFUZZ_CASES, KVFUZZ_SEED, KVFUZZ_FAILURES_DIR and KVFUZZ_SHRINK_SECONDS
// applied, for long runs without a rebuild. Throws std::invalid_argument naming the
// variable when a value is malformed.
EngineTestOptions with_environment(EngineTestOptions options);

// Registers the tests above (after with_environment). Throws std::invalid_argument for a
// bad environment variable or an engine without a factory, and a filesystem error for a
// corpus path that cannot be read.
void register_engine_tests(EngineInfo engine, EngineTestOptions options);

}  // namespace kvfuzz
