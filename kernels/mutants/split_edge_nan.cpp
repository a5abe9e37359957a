// split-edge-nan: the flash engine with the batch's longest decode fixing the split count
// (flash-batch-split), whose merge skips the partitions past a shorter row's keys by their
// first key, off by one (start > hi + 1 instead of start > hi), and hands the merge
// normalised partial rows acc / l, as split kernels that write one output per partition
// do. The partition that starts exactly one past the row's last key is empty but not
// skipped: 0 / 0 = NaN, and NaN times its zero weight is NaN. So only a row whose context
// ends on a partition edge, in a batch whose longest decode needs more partitions, is
// wrong; a row shorter by more than a partition is right.
#include <algorithm>
#include <cmath>

#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class SplitEdgeNanEngine final : public Mutant<cpu::FlashEngine> {
 public:
  explicit SplitEdgeNanEngine(const EngineConfig& config)
      : Mutant(config, {.count = cpu::SplitCount::batch_longest}) {}

 protected:
  void merge_partitions(size_t parts, cpu::KeyRange keys, int64_t size, float* out) override {
    const size_t vd = static_cast<size_t>(layout().value_dim);
    const auto np = static_cast<std::ptrdiff_t>(parts);
    const float m = *std::max_element(part_m().begin(), part_m().begin() + np);
    float l = 0;
    std::fill_n(out, vd, 0.0f);
    for (size_t p = 0; p < parts; ++p) {
      const int64_t start = keys.lo + static_cast<int64_t>(p) * size;
      if (start > keys.hi + 1) continue;  // BUG: the empty partition at hi + 1 is kept
      const float w = part_l()[p] * std::exp(part_m()[p] - m);
      l += w;
      for (size_t d = 0; d < vd; ++d) out[d] += part_acc()[p * vd + d] / part_l()[p] * w;
    }
    for (size_t d = 0; d < vd; ++d) out[d] /= l;
  }
};

}  // namespace

std::unique_ptr<Engine> make_split_edge_nan(const EngineConfig& config) {
  return std::make_unique<SplitEdgeNanEngine>(config);
}

}  // namespace kvfuzz::mutants
