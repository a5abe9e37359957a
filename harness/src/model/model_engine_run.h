// A model scenario through one whole-model engine (EngineInfo::make_model,
// kvfuzz/model_engine.h): the program op by op, as run_transformer feeds attention engines
// and the runner feeds one engine. Only logits and positions come back, so the rows carry
// no layer's attention output or hidden state.
#pragma once

#include "kvfuzz/engine.h"
#include "kvfuzz/scenario.h"
#include "model/transformer.h"

namespace kvfuzz::model {

struct WholeModelRun {
  // Rows in program order, each with the one position the engine reported
  // (reported_positions.size() == 1) and its logits; an engine error, a refused operation
  // or a wrongly shaped chunk is `error` at `error_at` (error_layer stays -1).
  TransformerRun run;
  EngineNumerics numerics;  // what the engine made for the scenario declares
};

// The engine is made with ModelEngineConfig{engine_config(scenario), *scenario.model}.
WholeModelRun run_model_engine(const Scenario& scenario, const EngineInfo& engine);

}  // namespace kvfuzz::model
