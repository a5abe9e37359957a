// The pieces behind register_engine_tests() (kvfuzz/engine_tests.h), one file each:
// the property cases, the corpus replay, and what a failing test leaves behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_tests.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::engine_tests {

// The body of Properties.<property>: `options.cases` generated scenarios; the first failure
// is shrunk, saved and reported through GoogleTest.
void check_generated_cases(const EngineInfo& engine, Property property,
                           const EngineTestOptions& options);

// The body of Corpus.<stem> and KvfuzzCorpus.<stem>.
void replay_fixture(const EngineInfo& engine, const std::filesystem::path& fixture,
                    const EngineTestOptions& options);

// What the engine announces; a GoogleTest failure (and nothing) when it cannot be made.
std::optional<EngineDeclarations> announced_declarations(const EngineInfo& engine);

// A scenario that fails `property` on the engine, and where it came from.
struct FailingCase {
  Scenario scenario;
  Property property = Property::prefix;
  PropertyOutcome outcome;  // of `scenario`
  std::string where;        // "case 3 of 100 (seed 123)", "fixture /path/x.json"
  // The corpus file it came from; empty for a generated case, which no file holds yet (its
  // raw scenario is saved first).
  std::filesystem::path corpus_fixture;
};

// Shrinks the failing case, saves the raw (generated cases only) and the shrunk fixture
// under options.failures_dir, and returns the message the test fails with: the report, the
// paths and the commands to replay and explain it (on the engine's plugin when
// options.engine_spec names one).
std::string keep_failure(const FailingCase& failing, const EngineInfo& engine,
                         const EngineTestOptions& options);

}  // namespace kvfuzz::engine_tests
