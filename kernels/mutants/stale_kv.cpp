// stale-kv: the contiguous engine whose reset sets the position counter to 0 but keeps
// the K/V buffer, so the new request's rows also attend to the old request's keys.
#include "cpu/contiguous_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class StaleKvEngine final : public Mutant<cpu::ContiguousEngine> {
 public:
  using Mutant::Mutant;

  void reset(int seq) override {
    check_seq(seq, "reset");
    clear_position(seq);  // BUG: the K/V buffer is not cleared
  }
};

}  // namespace

std::unique_ptr<Engine> make_stale_kv(const EngineConfig& config) {
  return std::make_unique<StaleKvEngine>(config);
}

}  // namespace kvfuzz::mutants
