// window-evicts-early: the paged engine whose decode path drops the page holding the
// window's first key one token early: it counts a page as out of the window once only its
// last slot is still inside (page_end - 1 <= lo instead of page_end <= lo), so a decode
// whose window starts on the last slot of a page misses that key. Only decodes that have
// slid the window past position 0 can show it, one query in page_size of a long decode run
// (every one with pages of 1): windows at page edges with long decode runs past the window
// (generate/windows_at_edges.h) are where it shows.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class WindowEvictsEarlyEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

 protected:
  void attend(const Query& query, int kv_head, cpu::KeyRange keys, float* out) override {
    const int64_t page_size = layout().page_size;
    if (query.chunk_tokens == 1 && layout().window && keys.lo > 0 &&
        (keys.lo + 1) % page_size == 0) {
      keys.lo += 1;  // BUG: the page's last visible slot taken for evicted
    }
    PagedEngine::attend(query, kv_head, keys, out);
  }
};

}  // namespace

std::unique_ptr<Engine> make_window_evicts_early(const EngineConfig& config) {
  return std::make_unique<WindowEvictsEarlyEngine>(config);
}

}  // namespace kvfuzz::mutants
