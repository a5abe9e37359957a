// page-tail-read: the paged engine whose decode path (one-token chunks) reads every slot of
// the sequence's pages, up to the end of the last page, poisoned tail included.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class PageTailReadEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

 protected:
  int64_t decode_read_last(int seq, cpu::KeyRange /*keys*/) const override {
    return kv().capacity(seq) - 1;  // BUG: the page's end, not the sequence's length
  }
};

}  // namespace

std::unique_ptr<Engine> make_page_tail_read(const EngineConfig& config) {
  return std::make_unique<PageTailReadEngine>(config);
}

}  // namespace kvfuzz::mutants
