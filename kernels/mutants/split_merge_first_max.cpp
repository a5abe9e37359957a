// split-merge-first-max: the flash engine whose split decode merges its partitions
// relative to the first partition's max instead of the largest one. The result is the
// same in exact arithmetic (the common factor cancels), and in f32 as long as no later
// partition's max exceeds the first's by more than ln(FLT_MAX) ~ 88.7: then exp overflows
// to inf and the row is inf / inf = NaN. Moderate scores never get there; score spreads
// across partitions (generate/score_spreads.h) do.
#include <algorithm>
#include <cmath>

#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class SplitMergeFirstMaxEngine final : public Mutant<cpu::FlashEngine> {
 public:
  using Mutant::Mutant;

 protected:
  void merge_partitions(size_t parts, cpu::KeyRange /*keys*/, int64_t /*size*/,
                        float* out) override {
    const size_t vd = static_cast<size_t>(layout().value_dim);
    const float m = part_m()[0];  // BUG: the first partition's max, not the largest
    float l = 0;
    std::fill_n(out, vd, 0.0f);
    for (size_t p = 0; p < parts; ++p) {
      const float w = std::exp(part_m()[p] - m);
      l += part_l()[p] * w;
      for (size_t d = 0; d < vd; ++d) out[d] += part_acc()[p * vd + d] * w;
    }
    for (size_t d = 0; d < vd; ++d) out[d] /= l;
  }
};

}  // namespace

std::unique_ptr<Engine> make_split_merge_first_max(const EngineConfig& config) {
  return std::make_unique<SplitMergeFirstMaxEngine>(config);
}

}  // namespace kvfuzz::mutants
