// An Engine that hands every call to another engine: a test derives from it and overrides
// only what it changes (a declaration, a step that fails), instead of writing the
// forwarding again.
#pragma once

#include <memory>
#include <span>
#include <utility>

#include "kvfuzz/engine.h"

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

}  // namespace kvfuzz::test
