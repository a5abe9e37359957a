// mask-origin: the paged engine whose causal mask restarts at the chunk: the query at
// chunk row r sees the keys at positions [0, r] (its reported position stays correct).
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class MaskOriginEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

 protected:
  cpu::KeyRange visible_range(int64_t index, int64_t chunk_start) const override {
    return {0, index - chunk_start};  // BUG: row index within the chunk, not the position
  }
};

}  // namespace

std::unique_ptr<Engine> make_mask_origin(const EngineConfig& config) {
  return std::make_unique<MaskOriginEngine>(config);
}

}  // namespace kvfuzz::mutants
