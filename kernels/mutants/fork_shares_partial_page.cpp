// fork-shares-partial-page: the paged engine whose fork hands the child the parent's
// partial last page itself instead of a copy, without counting the second holder, so no
// copy-on-write protects it: parent and child append into the same free slots, each
// overwriting the other's tokens. Invisible when the fork point ends a page.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class ForkSharesPartialPageEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

  void fork(int src, int dst) override {
    check_seq(src, "fork");
    check_seq(dst, "fork");
    kv_store().fork(src, dst, /*copy_partial_page=*/false);  // BUG: the partial page is shared
  }
};

}  // namespace

std::unique_ptr<Engine> make_fork_shares_partial_page(const EngineConfig& config) {
  return std::make_unique<ForkSharesPartialPageEngine>(config);
}

}  // namespace kvfuzz::mutants
