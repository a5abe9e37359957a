// Properties.<property>: scenarios from the one generator, judged by the one case judge
// (CaseJudge), as in `kvfuzz check`, the RapidCheck suites and the fuzz targets. Only the
// operations the engine announces are generated: an engine without truncate or fork gets
// appends in their place (generator_options_from_declarations), within its supports, and a
// whole-model engine gets model scenarios, so it is tested on everything it claims.
#include <gtest/gtest.h>

#include <string>

#include "engine_tests_internal.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/orchestrate.h"

namespace kvfuzz::engine_tests {

std::optional<EngineDeclarations> announced_declarations(const EngineInfo& engine) {
  try {
    return probe_declarations(engine);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return std::nullopt;
  }
}

void check_generated_cases(const EngineInfo& engine, Property property,
                           const EngineTestOptions& options) {
  const std::optional<EngineDeclarations> declared = announced_declarations(engine);
  if (!declared) return;
  // As every door makes them (kvfuzz/orchestrate.h), from the options' sizes and edges.
  const NamedDeclarations named{engine.name, *declared};
  GeneratorOptions generator;
  try {
    generator = generator_options_from_declarations({&named, 1}, {}, options.generator);
  } catch (const DeclarationError& e) {
    FAIL() << engine.name << ": " << e.what();
  }
  for (int i = 0; i < options.cases; ++i) {
    const uint64_t seed = case_seed(options.seed, i);
    PrngChoiceSource choices(seed);
    CaseJudge judge(generate_scenario(choices, generator));
    const CaseVerdict verdict = judge.judge({&property, 1}, engine, *declared);
    // Generated within the engine's own declarations, a case cannot lie outside them.
    if (verdict.skipped) FAIL() << engine.name << ": a generated case " << *verdict.skipped;
    PropertyOutcome outcome = verdict.outcome(property);
    if (outcome.pass) continue;
    Scenario scenario = judge.scenario();
    scenario.provenance.seed = seed;
    const std::string where = "case " + std::to_string(i + 1) + " of " +
                              std::to_string(options.cases) + " (seed " + std::to_string(seed) +
                              ", run seed " + std::to_string(options.seed) + ")";
    FAIL() << keep_failure(FailingCase{scenario, property, outcome, where, {}}, engine, options);
  }
}

}  // namespace kvfuzz::engine_tests
