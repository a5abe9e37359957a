// fork-restarts-positions: the paged engine whose fork gives the child the parent's pages
// but restarts its position counter at 0: the child's tokens are reported (and rotated and
// masked) from position 0, written over the prefix (in copies: the parent is untouched),
// so each sees only the child's own tokens instead of the whole prefix.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class ForkRestartsPositionsEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

  void fork(int src, int dst) override {
    PagedEngine::fork(src, dst);
    kv_store().rewind_without_poisoning(dst, 0);  // BUG: the child's counter restarts at 0
  }
};

}  // namespace

std::unique_ptr<Engine> make_fork_restarts_positions(const EngineConfig& config) {
  return std::make_unique<ForkRestartsPositionsEngine>(config);
}

}  // namespace kvfuzz::mutants
