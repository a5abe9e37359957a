// The properties on attention scenarios (judge/property.cpp), and what the model level's
// properties share with them. judge_property (kvfuzz/property.h, harness/src/verdict/)
// sends attention scenarios here and model scenarios to the model level, which builds on
// this stage: the judge knows nothing of models.
#pragma once

#include <string>
#include <string_view>

#include "kvfuzz/engine.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// "PROPERTY: engine 'NAME' breaks the property that CLAIM\n": every failing report's first
// line, attention and model alike (the model level says " (model level)" after the
// property and its own claim; the default claim is the property's, kProperties).
std::string property_headline(Property property, const EngineInfo& engine,
                              std::string_view claim = {}, std::string_view level = {});

// prefix against a reference already prepared (its rows compared and unjudged counted).
PropertyOutcome judge_prefix(const Scenario& scenario, const Prepared& prepared,
                             const EngineInfo& engine);

// Any property of an attention scenario (scenario.model unset).
PropertyOutcome judge_attention_property(Property property, const Scenario& scenario,
                                         const EngineInfo& engine);

}  // namespace kvfuzz
