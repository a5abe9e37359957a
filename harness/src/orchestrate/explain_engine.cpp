#include <string>

#include "judge/report.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "model/model_check.h"

namespace kvfuzz {

EngineExplanation explain_engine(const Scenario& scenario, const Prepared& prepared,
                                 const EngineInfo& engine, const EngineNumerics& numerics,
                                 Property property) {
  const std::string kind = engine.mutant ? "mutant" : "honest";
  const auto headline = [&](bool pass, const std::string& after) {
    return "engine " + engine.name + " (" + kind + "): " + (pass ? "pass" : "FAIL") + after + "\n";
  };
  if (property != Property::prefix) {
    // An invariance: the engine against itself on the property's variants. The report names
    // the first base row a variant changes, the variant's row for it, and both values.
    const PropertyOutcome outcome = judge_property(property, scenario, prepared, engine);
    std::string text =
        headline(outcome.pass, " (property " + std::string(property_name(property)) + ")");
    if (!outcome.pass) text += outcome.report + "\n";
    return {outcome.pass, text};
  }
  if (scenario.model) {
    const ModelVerdict verdict = judge_model(scenario, engine);
    std::string text = headline(
        verdict.pass, " (model level: " + std::to_string(prepared.slots.size()) + " logits rows)");
    if (!verdict.pass || verdict.first_layer) text += describe_model_divergence(verdict) + "\n";
    return {verdict.pass, text};
  }
  const Prepared own = numerics == prepared.numerics ? prepared : prepare(scenario, numerics);
  const CheckOutcome outcome = judge_engine(scenario, own, engine);
  std::string text = headline(outcome.verdict.pass, "") + explain_rows(scenario, own, outcome);
  if (!outcome.verdict.pass) text += describe_divergence(*outcome.verdict.first) + "\n";
  return {outcome.verdict.pass, text};
}

}  // namespace kvfuzz
