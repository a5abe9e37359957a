// An engine that runs a whole model and returns logits, as a serving engine (llama.cpp,
// vLLM) does: the other side of the model level. The model level's own cached forward
// (kernels/model/) runs kvfuzz's tiny transformer with one attention engine per layer; a
// model engine instead receives the vocabulary ids of a model scenario and computes the
// whole forward itself, from the same weights (make_weights(config.model, layout), so the
// double full-prefix reference judges it at the same (sequence, epoch, position)).
//
// Like an attention engine it owns its cache and its positions: it is given only what a
// caller gives a server (new token ids per sequence, reset, truncate, fork) and reports
// the absolute position it assigned to every row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct ModelEngineConfig {
  // Every layer's attention layout, the sequences, page order and poison, as an attention
  // engine gets them.
  EngineConfig engine;
  // vocab, width, layers, ffn and the weights' seed.
  ModelConfig model;
};

// One sequence's new tokens in a batched forward: vocabulary ids in [0, model.vocab).
struct ModelChunkIn {
  int seq = 0;
  std::span<const int> ids;
};

// What the engine returns for one chunk: logits[token][vocab], and the absolute position
// it assigned to each token.
struct ModelChunkOut {
  std::vector<float> logits;
  std::vector<int64_t> positions;
};

class ModelEngine {
 public:
  virtual ~ModelEngine() = default;
  // As Engine's: what it can do, how it computes, what it can be given (not depending on
  // the layout or the model's sizes).
  virtual EngineCapabilities capabilities() const { return {}; }
  virtual EngineNumerics numerics() const { return {}; }
  virtual EngineSupports supports() const { return {}; }
  // One batched forward: append every chunk's ids to its sequence and return one row of
  // logits per new token. outs.size() == chunks.size().
  virtual void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) = 0;
  // As Engine's reset, truncate and fork; truncate and fork are only called when
  // capabilities() announces them.
  virtual void reset(int seq) = 0;
  virtual void truncate(int /*seq*/, int64_t /*keep*/) {
    throw EngineError("this model engine does not support truncate");
  }
  virtual void fork(int /*src*/, int /*dst*/) {
    throw EngineError("this model engine does not support fork");
  }
};

// A reset, truncate or fork fed to a model engine as apply_history_op (kvfuzz/engine.h)
// feeds an attention engine: an optional operation it does not announce is refused with an
// EngineError, never called.
void apply_history_op(ModelEngine& engine, const Op& op);

}  // namespace kvfuzz
