// Corpus.<stem>: one fixture replayed on the engine by the function `kvfuzz replay` and the
// Python package use (replay_fixture, kvfuzz/orchestrate.h): the fixture's expect rows
// against the reference, the engine's declarations, prefix, and, for a regression shrunk
// under another property, that property too. A fixture outside the engine's declarations
// (an operation it does not announce, a dtype outside its supports) is skipped: it says
// nothing about such an engine, and the skip names why.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine_tests_internal.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/orchestrate.h"

namespace kvfuzz::engine_tests {

void replay_fixture(const EngineInfo& engine, const std::filesystem::path& fixture,
                    const EngineTestOptions& options) {
  Scenario scenario;
  try {
    scenario = load_fixture(fixture);
  } catch (const FixtureError& e) {
    FAIL() << e.what();
  }
  const std::optional<EngineDeclarations> declared = announced_declarations(engine);
  if (!declared) return;
  const FixtureReplay replay =
      kvfuzz::replay_fixture(scenario, prepare(scenario), engine, *declared);
  switch (replay.status) {
    case FixtureReplay::Status::pass:
      return;
    case FixtureReplay::Status::skipped:
      GTEST_SKIP() << "for " << engine.name << ", " << fixture.string() << " " << replay.detail;
    case FixtureReplay::Status::wrong_expect:
      FAIL() << fixture.string()
             << ": the reference disagrees with the fixture's own expect rows (the fixture is "
                "wrong, whatever the engine does):\n"
             << replay.detail;
    case FixtureReplay::Status::crashed:  // in this process: never (no Isolation here)
    case FixtureReplay::Status::fail:
      FAIL() << keep_failure(FailingCase{scenario, replay.property, replay.outcome,
                                         "fixture " + fixture.string(), fixture},
                             engine, options);
  }
}

}  // namespace kvfuzz::engine_tests
