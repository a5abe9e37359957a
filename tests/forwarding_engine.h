// An Engine that hands every call to another engine: a test derives from it and overrides
// only what it changes (a declaration, a step that fails), instead of writing the
// forwarding again.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "kvfuzz/engine.h"
#include "kvfuzz/model_engine.h"

namespace kvfuzz::test {

class ForwardingEngine : public Engine {
 public:
  explicit ForwardingEngine(std::unique_ptr<Engine> inner) : inner_(std::move(inner)) {}
  EngineCapabilities capabilities() const override { return inner_->capabilities(); }
  BitwiseClaims bitwise_claims() const override { return inner_->bitwise_claims(); }
  EngineNumerics numerics() const override { return inner_->numerics(); }
  EngineSupports supports() const override { return inner_->supports(); }
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    inner_->step(chunks, outs);
  }
  void reset(int seq) override { inner_->reset(seq); }
  void truncate(int seq, int64_t keep) override { inner_->truncate(seq, keep); }
  void fork(int src, int dst) override { inner_->fork(src, dst); }

 private:
  std::unique_ptr<Engine> inner_;
};

// The same for a whole-model engine (kvfuzz/model_engine.h).
class ForwardingModelEngine : public ModelEngine {
 public:
  explicit ForwardingModelEngine(std::unique_ptr<ModelEngine> inner) : inner_(std::move(inner)) {}
  EngineCapabilities capabilities() const override { return inner_->capabilities(); }
  EngineNumerics numerics() const override { return inner_->numerics(); }
  EngineSupports supports() const override { return inner_->supports(); }
  void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) override {
    inner_->step(chunks, outs);
  }
  void reset(int seq) override { inner_->reset(seq); }
  void truncate(int seq, int64_t keep) override { inner_->truncate(seq, keep); }
  void fork(int src, int dst) override { inner_->fork(src, dst); }

 private:
  std::unique_ptr<ModelEngine> inner_;
};

// An engine declaring one head size for q, k and v in multiples of 4 (as ONNX Runtime's
// kernels do); everything else is the wrapped engine's.
class OneHeadSizeEngine final : public ForwardingEngine {
 public:
  using ForwardingEngine::ForwardingEngine;
  EngineSupports supports() const override {
    EngineSupports s;
    s.head_dim_multiple = 4;
    s.value_dim_is_head_dim = true;
    return s;
  }
};

// `info` under another name, each engine it makes wrapped in OneHeadSizeEngine.
inline EngineInfo with_one_head_size(EngineInfo info, std::string name) {
  info.name = std::move(name);
  const EngineFactory inner = info.make;
  info.make = [inner](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<OneHeadSizeEngine>(inner(config));
  };
  return info;
}

// A registered engine by name; a test that names one that is not there fails loudly.
inline const EngineInfo& engine(const char* name) {
  const EngineInfo* info = find_engine(name);
  if (info == nullptr) throw std::runtime_error(std::string("no engine ") + name);
  return *info;
}

}  // namespace kvfuzz::test
