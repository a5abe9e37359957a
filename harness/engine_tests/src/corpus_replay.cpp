// Corpus.<stem>: one fixture replayed on the engine as `kvfuzz replay` replays it: the
// fixture's expect rows against the reference, the engine against the reference (prefix),
// and, for a regression shrunk under another property, that property too. A fixture whose
// program truncates or forks is skipped on an engine that does not announce the operation:
// it says nothing about such an engine, and the skip names what is missing.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "corpus/provenance.h"
#include "engine_tests_internal.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"

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
  if (const auto why = unjudgeable(scenario, *declared)) {
    GTEST_SKIP() << "for " << engine.name << ", " << fixture.string() << " " << *why;
  }
  if (const auto problem = judge_expect(scenario, prepare(scenario))) {
    FAIL() << fixture.string()
           << ": the reference disagrees with the fixture's own expect rows (the fixture is "
              "wrong, whatever the engine does):\n"
           << *problem;
  }
  // The property a regression was shrunk under, after prefix (which every fixture states).
  const Property recorded = recorded_property(scenario);
  std::vector<Property> properties = {Property::prefix};
  if (recorded != Property::prefix) properties.push_back(recorded);
  for (const Property property : properties) {
    PropertyOutcome outcome = judge_property(property, scenario, engine);
    if (outcome.pass) continue;
    const std::string where = "fixture " + fixture.string();
    FAIL() << keep_failure(FailingCase{scenario, property, outcome, where, fixture}, engine,
                           options);
  }
}

}  // namespace kvfuzz::engine_tests
