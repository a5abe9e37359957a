// alibi-kv-head-slope: the paged engine that takes a q head's ALiBi slope from its kv head's
// index (slopes[h / group]) instead of its own (slopes[h]), as a GQA kernel that indexes
// its per-head tables by the kv head it reads. Identical under MHA; under GQA and MQA every
// q head but the first of each group gets another head's slope.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class AlibiKvHeadSlopeEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

 protected:
  cpu::LogitFeatures logit_features(const Query& query) const override {
    cpu::LogitFeatures features = PagedEngine::logit_features(query);
    if (!layout().alibi.empty()) {
      // BUG: the kv head's index, not the q head's
      features.slope =
          static_cast<float>(layout().alibi[static_cast<size_t>(kv_head_for(query.q_head))]);
    }
    return features;
  }
};

}  // namespace

std::unique_ptr<Engine> make_alibi_kv_head_slope(const EngineConfig& config) {
  return std::make_unique<AlibiKvHeadSlopeEngine>(config);
}

}  // namespace kvfuzz::mutants
