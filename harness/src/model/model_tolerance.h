// The model-level tolerance (derived in model_tolerance.cpp): per row, one bound for each
// layer's attention output, one for each layer's hidden state, one for the logits.
#pragma once

#include <cstddef>
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

// `reference`: reference_transformer(scenario, weights), and `weights`:
// make_weights(*scenario.model, scenario.layout), rounded to the activations' dtype for a
// whole-model engine that declares one (rounded_weights; the bounds are cached on that
// contract).
//
// The bounds are a pure function of the model, the layout less its page size (neither the
// reference nor its perturbed passes see pages), the logical streams and the declared
// numerics; they are computed once per thread for each such key and shared (least recently
// used dropped beyond kModelBoundsCacheEntries): the engines judged on one scenario with
// the same numerics, and the schedule, layout and poison variants of the invariance
// properties (same streams), share the K perturbed reference passes.
std::map<RowKey, RowBounds> model_bounds(const Scenario& scenario,
                                         const TransformerWeights& weights,
                                         const std::map<RowKey, TransformerRow>& reference,
                                         const ModelNumerics& declared = {});

constexpr size_t kModelBoundsCacheEntries = 32;

// This thread's bounds cache: lookups answered from it and computed.
struct ModelBoundsCacheStats {
  long hits = 0, misses = 0;
};
ModelBoundsCacheStats model_bounds_cache_stats();
void clear_model_bounds_cache();  // entries and counters

}  // namespace kvfuzz::model
