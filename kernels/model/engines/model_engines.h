// The built-in whole-model engines (kvfuzz/model_engine.h): kvfuzz's tiny transformer with
// its own per-layer KV caches behind the model door, given vocabulary ids and returning
// logits, as llama.cpp is driven. They test the door both ways without a real serving
// engine: the honest ones must pass all six properties, the mutants must be rejected.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/model_engine.h"

namespace kvfuzz::model_engines {

// How the layers' attention computes (each layer's cache is one built-in CPU engine).
enum class Arithmetic {
  f32,     // paged engine, f32 throughout
  p_f16,   // flash engine: K/V in the storage dtype (f32 or f16) holding rotated keys,
           // rotated q rounded to it, P rounded to f16 before P.V (llama.cpp's CPU path
           // without flash attention, whose cache is f16)
  acc_f16  // contiguous engine: as p_f16 but P kept and P.V summed in f16 (ggml's CPU
           // flash attention)
};

// The deliberate bugs.
enum class Bug {
  none,
  truncate_keeps_one,  // truncate(seq, keep) keeps keep + 1 tokens (when there are as many)
  fork_from_self,      // fork(src, dst) leaves dst as it was instead of copying src
};

// `activations`: the whole model in that dtype (weights and every activation rounded to
// it, as a torch model loaded in bf16 or f16 computes), declared as
// EngineNumerics::activations.
std::unique_ptr<ModelEngine> make_cached_model(const ModelEngineConfig& config,
                                               Arithmetic arithmetic, Bug bug,
                                               DType activations = DType::f32);

// What each Arithmetic declares (EngineNumerics of the logits: f32).
EngineNumerics declared_numerics(Arithmetic arithmetic);

// The registry's model engines, honest ones first (kernels/registry.cpp lists them after
// the attention engines).
std::vector<EngineInfo> registry_entries();

}  // namespace kvfuzz::model_engines
