// wrong-kv-head: the flash engine mapping q head h to kv head h % kv_heads instead of
// h / group: identical under MHA and MQA, wrong under GQA.
#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class WrongKvHeadEngine final : public Mutant<cpu::FlashEngine> {
 public:
  using Mutant::Mutant;

 protected:
  int kv_head_for(int q_head) const override {
    return q_head % layout().kv_heads;  // BUG: interleaved instead of grouped
  }
};

}  // namespace

std::unique_ptr<Engine> make_wrong_kv_head(const EngineConfig& config) {
  return std::make_unique<WrongKvHeadEngine>(config);
}

}  // namespace kvfuzz::mutants
