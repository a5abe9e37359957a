// CaseJudge (kvfuzz/orchestrate.h): one case's properties on one engine, against the
// case's reference prepared once per declared numerics.
#include <exception>
#include <string>

#include "kvfuzz/orchestrate.h"

namespace kvfuzz {

const Prepared& CaseJudge::prepared(const EngineNumerics& numerics) {
  for (const Prepared& p : prepared_) {
    if (p.numerics == numerics) return p;
  }
  return prepared_.emplace_back(prepare(scenario_, numerics));
}

std::string while_judging(const std::optional<Property>& property) {
  return property ? " while judging " + std::string(property_name(*property)) : "";
}

namespace {

// What a case that ended at its engine's first hang says (CaseVerdict::hung_while).
std::string hung_note(Property property) {
  return "the engine hung while judging " + std::string(property_name(property)) +
         " (its time limit ended the call): kvfuzz judged no further property of this case\n";
}

}  // namespace

PropertyOutcome CaseVerdict::outcome(Property property) const {
  for (const auto& [judged, outcome] : outcomes) {
    if (judged == property) return outcome;
  }
  PropertyOutcome failed;
  failed.pass = false;
  failed.signature = FailureSignature{property, FailureKind::engine_error};
  failed.report = hung_while ? hung_note(*hung_while)
                             : "the engine failed outside a run" + while_judging(error_while) +
                                   ": " + engine_error.value_or("no verdict was reached") + "\n";
  return failed;
}

CaseVerdict CaseJudge::judge(std::span<const Property> properties, const EngineInfo& engine,
                             const EngineDeclarations& declared,
                             const std::function<void(Property, const CaseVerdict&)>& before) {
  CaseVerdict verdict;
  if (auto outside = unjudgeable(scenario_, declared)) {
    verdict.skipped = std::move(*outside);
    return verdict;
  }
  const auto hangs = [&engine]() -> int64_t { return engine.hangs ? engine.hangs() : 0; };
  const int64_t hangs_before = hangs();
  std::optional<Property> current;
  try {
    for (const Property property : properties) {
      current = property;
      if (before) before(property, verdict);
      // prefix judges against the shared reference; the other properties prepare their
      // variants themselves, and a model scenario its own oracle (judge_property).
      PropertyOutcome outcome =
          judge_property(property, scenario_, prepared(declared.numerics), engine);
      if (property == Property::prefix) {
        verdict.rows_compared = outcome.rows_compared;
        verdict.rows_unjudged = outcome.rows_unjudged;
        verdict.bound_used = outcome.bound_used;
      }
      if (hangs() > hangs_before) {
        // The engine hung (its own time limit killed it): the properties after this one
        // would each wait out the same limit. The case ends here; the property's failure,
        // an engine error, is the finding.
        verdict.hung_while = property;
        if (!outcome.pass) outcome.report += hung_note(property);
        verdict.outcomes.emplace_back(property, std::move(outcome));
        break;
      }
      verdict.outcomes.emplace_back(property, std::move(outcome));
    }
  } catch (const std::exception& e) {
    verdict.engine_error = e.what();
    verdict.error_while = current;
  }
  return verdict;
}

}  // namespace kvfuzz
