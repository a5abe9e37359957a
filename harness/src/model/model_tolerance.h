// The model-level tolerance (derived in model_tolerance.cpp): per row, one bound for each
// layer's attention output, one for each layer's hidden state, one for the logits.
#pragma once

#include <map>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "model/transformer.h"

namespace kvfuzz::model {

struct RowBounds {
  std::vector<double> attention;  // per layer, every value of the row
  std::vector<double> hidden;     // per layer
  double logits = 0;
};

// How the engine judged computes: what it declares, and whether it is a whole-model
// engine (its `output` is then the logits' dtype, else each layer's attention rows').
struct ModelNumerics {
  EngineNumerics numerics;
  bool whole_model = false;
};

// `reference`: reference_transformer(scenario, weights).
std::map<RowKey, RowBounds> model_bounds(const Scenario& scenario,
                                         const TransformerWeights& weights,
                                         const std::map<RowKey, TransformerRow>& reference,
                                         const ModelNumerics& declared = {});

}  // namespace kvfuzz::model
