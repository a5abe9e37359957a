// stale-position: the contiguous engine whose reset clears the K/V buffer but keeps the
// position counter, so the next epoch is reported (and rotated) at n_A, n_A + 1, ...
#include "cpu/contiguous_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class StalePositionEngine final : public Mutant<cpu::ContiguousEngine> {
 public:
  using Mutant::Mutant;

  void reset(int seq) override {
    check_seq(seq, "reset");
    clear_kv(seq);  // BUG: the position counter is not cleared
  }
};

}  // namespace

std::unique_ptr<Engine> make_stale_position(const EngineConfig& config) {
  return std::make_unique<StalePositionEngine>(config);
}

}  // namespace kvfuzz::mutants
