// Shared by the property suites: the generator options of every case (prop_all.cpp and
// prop_mutants.cpp) and the body of one RapidCheck property per (property, honest engine)
// (prop_all.cpp). Each case draws a scenario from the one generator (rc_choice_source.h)
// within the engine's declarations and judges it with the one case judge (CaseJudge,
// kvfuzz/orchestrate.h), as `kvfuzz check` and the engine tests do. A failure prints the report and
// the scenario as a fixture with its provenance, ready to save under corpus/ and replay.
#pragma once

#include <rapidcheck.h>

#include <string>
#include <string_view>

#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "rc_choice_source.h"

namespace kvfuzz::props {

// The generator's own defaults: most scenarios at its typical sizes, one in
// `large_one_in` up to its maxima. Under ASan, 60 cases per (property, engine) take well
// under a second each.
inline GeneratorOptions suite_options() {
  return GeneratorOptions{};
}

// The scenario as a fixture to save: named after what failed, with provenance.
inline std::string failing_fixture(Scenario scenario, Property property, std::string_view engine,
                                   const PropertyOutcome& outcome) {
  scenario.name = suite_fixture_stem(property, engine);
  stamp_failure(scenario, "check", engine, property, failure_line(outcome));
  try {
    return write_fixture(scenario);
  } catch (const FixtureError& error) {
    return std::string("<scenario that cannot be written as a fixture: ") + error.what() + ">";
  }
}

inline void holds(Property property, std::string_view engine_name) {
  const EngineInfo* engine = find_engine(engine_name);
  RC_ASSERT(engine != nullptr);
  // Only what the engine announces and takes, as every door asks (kvfuzz/orchestrate.h).
  const NamedDeclarations declared{engine->name, probe_declarations(*engine)};
  CaseJudge judge(
      *gen_scenario(generator_options_from_declarations({&declared, 1}, {}, suite_options())));
  const CaseVerdict verdict = judge.judge({&property, 1}, *engine, declared.declared);
  // Generated within the engine's own declarations, a case cannot lie outside them.
  RC_ASSERT(!verdict.skipped);
  const Scenario& scenario = judge.scenario();
  const PropertyOutcome outcome = verdict.outcome(property);
  if (!outcome.pass) {
    RC_FAIL(outcome.report +
            "\nThe scenario as a fixture (save as corpus/regressions/NAME.json):\n" +
            failing_fixture(scenario, property, engine_name, outcome));
  }
}

}  // namespace kvfuzz::props
