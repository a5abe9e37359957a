// truncate-shared-in-place: the paged engine whose truncate poisons the dropped slots of
// the kept page in place even when a fork still shares that page: a copy-on-write that was
// forgotten, so the other holder of the page loses its tokens to the poison.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class TruncateSharedInPlaceEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

  void truncate(int seq, int64_t keep) override {
    check_seq(seq, "truncate");
    kv_store().truncate(seq, keep, /*copy_shared_page=*/false);  // BUG: no copy-on-write
  }
};

}  // namespace

std::unique_ptr<Engine> make_truncate_shared_in_place(const EngineConfig& config) {
  return std::make_unique<TruncateSharedInPlaceEngine>(config);
}

}  // namespace kvfuzz::mutants
