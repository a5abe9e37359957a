// judge_property (kvfuzz/property.h): the one entry to the six properties for attention
// and model scenarios alike. The model/attention dispatch happens here, once, above both
// libraries (kvfuzz_attention, judge/; kvfuzz_model, model/), so that neither knows the
// other's caller: the model level builds on the attention judge, never the reverse.
#include "judge/attention_property.h"
#include "kvfuzz/property.h"
#include "model/model_check.h"

namespace kvfuzz {

PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const EngineInfo& engine) {
  if (scenario.model) return judge_model_property(property, scenario, engine);
  return judge_attention_property(property, scenario, engine);
}

PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const Prepared& prepared, const EngineInfo& engine) {
  if (property == Property::prefix && !scenario.model) {
    return judge_prefix(scenario, prepared, engine);
  }
  return judge_property(property, scenario, engine);
}

}  // namespace kvfuzz
