// The tiny decoder-only transformer of the model level (kernels/model/): token embedding,
// `layers` x [RMSNorm, attention, residual, RMSNorm, SwiGLU MLP, residual], final RMSNorm
// and LM head. Attention uses the scenario's layout (q_heads, kv_heads with GQA, head_dim,
// value_dim, RoPE, window, scale, dtype); in the cached forward each layer's attention is
// one engine instance, so a cache bug in layer k shows up first in layer k.
//
// Two evaluations of the same weights:
//   run_transformer        the program op by op through engines, as a server runs it
//                          (f32 arithmetic; q/k/v rounded to the layout's dtype, as every
//                          engine input is)
//   reference_transformer  every (sequence, epoch) stream on its full prefix, no cache,
//                          double precision: the judge's oracle, on the judge's side
//                          (harness/src/model/reference_forward.h)
// Both keep every layer's attention output and hidden state per row, for localisation.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Deterministic weights from ModelConfig::seed with the project's PRNG (kvfuzz/prng.h),
// bit-identical on every machine and compiler; row-major, values f32 (stored as float).
struct TransformerWeights {
  struct Layer {
    std::vector<float> attention_norm;  // [width]
    std::vector<float> wq;              // [width][q_heads * head_dim]
    std::vector<float> wk;              // [width][kv_heads * head_dim]
    std::vector<float> wv;              // [width][kv_heads * value_dim]
    std::vector<float> wo;              // [q_heads * value_dim][width]
    std::vector<float> mlp_norm;        // [width]
    std::vector<float> w_gate, w_up;    // [width][ffn]
    std::vector<float> w_down;          // [ffn][width]
  };
  std::vector<float> embedding;  // [vocab][width]
  std::vector<Layer> layers;
  std::vector<float> final_norm;  // [width]
  std::vector<float> lm_head;     // [width][vocab]
};

TransformerWeights make_weights(const ModelConfig& model, const Layout& layout);
// Every weight rounded to `dtype` (to nearest even), as a model loaded in that dtype holds
// them (EngineNumerics::activations); f32: unchanged.
TransformerWeights rounded_weights(TransformerWeights weights, DType dtype);

// One token's trip through the model.
struct TransformerRow {
  RowKey key;        // the program's (seq, epoch, position) for this token
  RowOrigin origin;  // op, chunk, token
  // Per layer: the position the layer's engine reported (the reference: the key's), the
  // attention output [q_heads * value_dim] and the hidden state after the layer [width].
  std::vector<int64_t> reported_positions;
  std::vector<std::vector<double>> attention;
  std::vector<std::vector<double>> hidden;
  std::vector<double> logits;  // [vocab]
};

struct TransformerRun {
  std::vector<TransformerRow> rows;  // program order
  std::string error;                 // an engine threw or returned a wrong shape
  RowOrigin error_at;
  int error_layer = -1;
  EngineErrorKind error_kind = EngineErrorKind::error;  // a hazard's kind passes through
  // What the layers' engines declare (layer 0's): the model tolerance models it.
  EngineNumerics numerics;
};

// `layer_engines[l]` makes layer l's engine (layer_engines.size() == model.layers).
TransformerRun run_transformer(const Scenario& scenario, const TransformerWeights& weights,
                               std::span<const EngineInfo* const> layer_engines);

}  // namespace kvfuzz
