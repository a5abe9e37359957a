// Judging at model level (model/transformer.h): cached logits against full-prefix logits
// at the same (sequence, epoch, absolute position), under a tolerance derived from the
// layer count, the widths and the dtype (model_check.cpp says how), before anything is
// sampled; and, for a failure, the first layer whose engine reported a wrong position or
// whose attention output or hidden state left its own bound, with its row and head.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "judge/compare.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/verdict.h"

namespace kvfuzz {

// The model level's verdict: what fails it and, to locate a failure, the first layer that
// went wrong. Every divergence in it is the judge's Divergence with its model site and layer
// set (kvfuzz/verdict.h), so the properties pass it on as it is.
struct ModelVerdict {
  bool pass = true;
  // The engine ran the whole model (EngineInfo::make_model): only logits and positions came
  // back, so no layer is ever named (first_layer stays empty).
  bool whole_model = false;
  int rows_compared = 0;
  std::optional<Divergence> first_logits;  // the first diverging logits row
  std::optional<Divergence> first_layer;   // the first layer that went wrong
  // A whole-model engine's first wrong reported position (its rows have no layers).
  std::optional<Divergence> first_position;
  // What fails the verdict: the first logits row when one diverges, else the first wrong
  // reported position (layer order, then program order), else the engine error. Nothing
  // when the verdict passes. The property's signature comes from it.
  std::optional<Divergence> failure;
  // The largest |got - expected| / bound over every value compared (infinite for a value
  // that is not finite): how close the run came to failing, for margins in tests/benchmarks.
  double worst_logits_ratio = 0;
  double worst_layer_ratio = 0;  // over every layer's attention outputs and hidden states
};

// Every layer runs `engine`; with `faulty`, layer faulty->first runs faulty->second
// instead (localisation tests: a mutant in one layer only). An engine with make_model runs
// the whole scenario as one ModelEngine instead (`faulty` is then ignored): its logits and
// positions are judged, under the tolerance of the numerics it declares.
ModelVerdict judge_model(const Scenario& scenario, const EngineInfo& engine,
                         std::optional<std::pair<int, const EngineInfo*>> faulty = std::nullopt);

// Several lines for a person: the logits row (max error, top-5 both sides) and the layer.
std::string describe_model_divergence(const ModelVerdict& verdict);

// A property of a model scenario (judge_property sends them here, so replay, shrink, the
// fuzz targets and campaigns judge model fixtures without knowing). prefix is judge_model.
// Each invariance (schedule, layout, poison, reset, batch) builds the variants of
// property_variants.h (same model, same token ids) and checks each at model level: the
// property fails on the first variant that fails while the scenario itself passes; a
// scenario that already fails is a prefix failure, not the invariance's.
PropertyOutcome judge_model_property(Property property, const Scenario& scenario,
                                     const EngineInfo& engine);

}  // namespace kvfuzz
