// reset-keeps-block-table: the paged engine whose reset frees the sequence's pages (they
// are poisoned and go to the free list) but leaves them in its block table. The next
// request writes into those pages as if it still owned them, and once it outgrows them
// the free list hands it one of them again: its later tokens overwrite its first ones.
// Invisible while the new request fits in the stale pages.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class ResetKeepsBlockTableEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

  void reset(int seq) override {
    check_seq(seq, "reset");
    kv_store().release(seq, /*clear_block_table=*/false);  // BUG: stale block-table entries
  }
};

}  // namespace

std::unique_ptr<Engine> make_reset_keeps_block_table(const EngineConfig& config) {
  return std::make_unique<ResetKeepsBlockTableEngine>(config);
}

}  // namespace kvfuzz::mutants
