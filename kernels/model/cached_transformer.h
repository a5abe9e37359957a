// The tiny transformer's cached forward as a server runs it, one batched step at a time:
// each layer's attention is one engine instance holding that layer's KV cache. Two callers
// share it, so the forward exists once: run_transformer (the program op by op through
// attention engines, for the model level's judge and its layer localisation) and the
// built-in whole-model engines (model_engines.h: ids in, logits out, as llama.cpp is
// driven). Private to kernels/model and harness/src/model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/model_engine.h"
#include "model/model_math.h"
#include "model/transformer.h"

namespace kvfuzz::model {

// Something went wrong in layer `layer` (-1: outside the layers, say a token id outside
// the vocabulary); `chunk` is the step's chunk it concerns, -1 for the whole step.
// `kind`: a layer engine's own EngineError kind (a race the SIMT launcher saw) passes through.
struct LayerFailure : EngineError {
  LayerFailure(const std::string& message, int failed_layer, int failed_chunk = -1,
               EngineErrorKind failed_kind = EngineErrorKind::error)
      : EngineError(failed_kind, message), layer(failed_layer), chunk(failed_chunk) {}
  int layer;
  int chunk;
};

// One token's trip through one step: per layer the position the layer's engine reported,
// its attention output and the hidden state after it; then the logits.
struct StepRow {
  std::vector<int64_t> positions;
  std::vector<std::vector<double>> attention, hidden;
  std::vector<double> logits;
};

class CachedTransformer {
 public:
  // `weights` must outlive the transformer. layer_engines.size() == model.layers; every
  // layer's engine is made with `config`. Throws LayerFailure naming the layer whose
  // engine could not be made.
  // `activations`: a model computing in a narrower dtype (EngineNumerics::activations, with
  // `weights` rounded to it: rounded_weights) rounds every product, norm, residual sum,
  // SwiGLU product and attention output to it, as a torch model loaded in that dtype does.
  CachedTransformer(const TransformerWeights& weights, const ModelConfig& model,
                    const EngineConfig& config, std::span<const EngineInfo* const> layer_engines,
                    DType activations = DType::f32);

  // One batched forward: rows in chunk order, then token order. Throws LayerFailure (an
  // engine threw, or returned a wrongly shaped chunk).
  std::vector<StepRow> step(std::span<const ModelChunkIn> chunks);
  // A reset, truncate or fork sent to every layer (apply_history_op: an unannounced op is
  // refused). Throws LayerFailure.
  void history(const Op& op);

  const Engine& layer(size_t l) const { return *engines_.at(l); }

 private:
  // The phases of step():
  // Checks every id, fills h_ with the embeddings and sizes the buffers; returns the rows.
  size_t embed(std::span<const ModelChunkIn> chunks);
  // Layer l's q, k, v of every row, rounded to the layout's dtype (every engine input is).
  void project_qkv(size_t l, size_t total);
  // Layer l's engine on the step's chunks: its outputs into attn_, its positions into rows.
  void attend(size_t l, std::span<const ModelChunkIn> chunks, std::vector<StepRow>& rows);
  // Layer l after attention: the output projection, the MLP and both residuals.
  void feed_forward(size_t l, std::vector<StepRow>& rows);

  // model_math.h's row functions with `rounded` as the activations' dtype asks.
  template <class Rows>
  void with_rounding(Rows&& rows) const;

  const TransformerWeights& weights_;
  Dims d_;
  Layout layout_;
  DType activations_;
  std::vector<std::unique_ptr<Engine>> engines_;
  // Reused from step to step.
  std::vector<float> h_, n_, q_, k_, v_, attn_, o_, gate_, up_, logits_;
  std::vector<ChunkIn> ins_;
  std::vector<ChunkOut> outs_;
  std::vector<size_t> chunk_first_;  // each chunk's first row, then the step's row count
};

}  // namespace kvfuzz::model
