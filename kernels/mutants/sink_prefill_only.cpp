// sink-prefill-only: the flash engine that joins the attention sink to the softmax on its
// prefill path only: its decode kernels (one-pass and split) leave the sink out, as a
// kernel pair whose decode half was written before sinks were added. A row computed in a
// chunk of two or more tokens is right; the same row decoded alone is too large by the
// sink's share.
#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class SinkPrefillOnlyEngine final : public Mutant<cpu::FlashEngine> {
 public:
  using Mutant::Mutant;

 protected:
  cpu::LogitFeatures logit_features(const Query& query) const override {
    cpu::LogitFeatures features = FlashEngine::logit_features(query);
    if (query.chunk_tokens == 1) features.sink.reset();  // BUG: no sink when decoding
    return features;
  }
};

}  // namespace

std::unique_ptr<Engine> make_sink_prefill_only(const EngineConfig& config) {
  return std::make_unique<SinkPrefillOnlyEngine>(config);
}

}  // namespace kvfuzz::mutants
