// softcap-twice-split: the flash engine whose split decode path soft-caps its scores twice
// (cap tanh(tanh(s / cap))): as a split-KV kernel that caps inside the partial pass while
// its launcher already handed it capped scores. The one-pass paths are right, so only a
// decode that sees at least the split threshold of keys, under a soft cap, shows it.
#include <cmath>

#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class SoftcapTwiceSplitEngine final : public Mutant<cpu::FlashEngine> {
 public:
  using Mutant::Mutant;

 protected:
  float split_logit(const cpu::LogitFeatures& features, float score, int64_t key) const override {
    if (features.softcap > 0) score = features.softcap * std::tanh(score / features.softcap);
    return features.logit(score, key);  // BUG: capped a second time
  }
};

}  // namespace

std::unique_ptr<Engine> make_softcap_twice_split(const EngineConfig& config) {
  return std::make_unique<SoftcapTwiceSplitEngine>(config);
}

}  // namespace kvfuzz::mutants
