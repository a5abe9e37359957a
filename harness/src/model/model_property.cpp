// The six properties at model level (judge_model_property in model/model_check.h).
//
// Why invariances are judged against the reference here and not engine against engine as
// at attention level (property.cpp): a model's rows are logits after several layers, and
// the two runs of an invariance feed each layer different cached states; the reference
// tolerance of each run is what is derived (model_tolerance.cpp), so "each run is within
// its bound of the same full-prefix logits" is the justified form of "the two runs agree".
#include <string>
#include <vector>

#include "judge/attention_property.h"
#include "judge/property_variants.h"
#include "model/model_check.h"

namespace kvfuzz {

namespace {

// What failed the verdict (ModelVerdict::failure): logits, a wrong position, an error. It
// is the judge's Divergence, with its model site and layer.
const Divergence& deciding(const ModelVerdict& verdict) {
  return *verdict.failure;
}

}  // namespace

PropertyOutcome judge_model_property(Property property, const Scenario& scenario,
                                     const EngineInfo& engine) {
  PropertyOutcome result;
  const std::string name(property_name(property));
  const ModelVerdict base = judge_model(scenario, engine);
  if (property == Property::prefix) {
    result.rows_compared = base.rows_compared;  // the logits rows
    if (base.pass) {
      result.bound_used = base.worst_logits_ratio;  // the logits' largest error / bound
      result.report =
          "prefix (model level): pass (" + std::to_string(base.rows_compared) + " logits rows)\n";
      return result;
    }
    const Divergence& first = deciding(base);
    result.pass = false;
    result.signature = FailureSignature{Property::prefix, first.kind};
    result.first = first;
    result.report =
        property_headline(property, engine,
                          "every cached logits row equals the full-prefix row at the same key",
                          " (model level)") +
        describe_model_divergence(base);
    return result;
  }
  const std::vector<ScenarioVariant> variants = property_variants(property, scenario);
  if (!base.pass || variants.empty()) {
    // Nothing this property can say: the scenario itself fails (prefix's failure), or no
    // variant differs from it.
    result.report = name + " (model level): pass (" +
                    (base.pass ? "no variant differs" : "the scenario itself fails prefix") + ")\n";
    return result;
  }
  for (const ScenarioVariant& variant : variants) {
    const ModelVerdict verdict = judge_model(variant.scenario, engine);
    if (verdict.pass) continue;
    const Divergence& first = deciding(verdict);
    result.pass = false;
    result.signature = FailureSignature{property, first.kind};
    result.first = first;
    result.report =
        property_headline(property, engine,
                          "the variant's logits equal the full-prefix logits as the scenario's do",
                          " (model level)") +
        "  variant: " + variant.description + "\n" + describe_model_divergence(verdict);
    return result;
  }
  result.report = name + " (model level): pass (" + std::to_string(variants.size()) +
                  (variants.size() == 1 ? " variant)\n" : " variants)\n");
  return result;
}

}  // namespace kvfuzz
