// A user's whole-model engine class as kvfuzz_add_engine_plugin(... MODEL) takes it:
// constructible from const kvfuzz::ModelEngineConfig&. It is the built-in model-cached
// (so the tests know what it must give).
#pragma once

#include <memory>

#include "kvfuzz/model_engine.h"
#include "model/engines/model_engines.h"

class TinyModelEngine final : public kvfuzz::ModelEngine {
 public:
  explicit TinyModelEngine(const kvfuzz::ModelEngineConfig& config)
      : inner_(kvfuzz::model_engines::make_cached_model(
            config, kvfuzz::model_engines::Arithmetic::f32, kvfuzz::model_engines::Bug::none)) {}
  kvfuzz::EngineCapabilities capabilities() const override { return inner_->capabilities(); }
  void step(std::span<const kvfuzz::ModelChunkIn> chunks,
            std::span<kvfuzz::ModelChunkOut> outs) override {
    inner_->step(chunks, outs);
  }
  void reset(int seq) override { inner_->reset(seq); }
  void truncate(int seq, int64_t keep) override { inner_->truncate(seq, keep); }
  void fork(int src, int dst) override { inner_->fork(src, dst); }

 private:
  std::unique_ptr<kvfuzz::ModelEngine> inner_;
};
