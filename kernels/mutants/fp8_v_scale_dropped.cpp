// fp8-v-scale-dropped: the paged engine whose value path reads fp8 V without its scale (K
// keeps its own), as a kernel whose K dequantization was given the scale and whose V
// epilogue was not: v_scale is 1 in most unit tests, so the bug hides there. Every row
// over a V scale other than 1 is off by that factor.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

void decode_without_scale(const KvFormat& format, int kv_head, const uint8_t* in, int n,
                          float* out) {
  // BUG: the fp8 codes read back as if the scale were 1
  KvFormat unscaled = format;
  unscaled.scale.clear();
  decode_row(unscaled, kv_head, in, n, out);
}

class Fp8VScaleDroppedEngine final : public Mutant<cpu::PagedEngine> {
 public:
  explicit Fp8VScaleDroppedEngine(const EngineConfig& config) : Mutant(config) {
    kv_store().set_decoders(&decode_row, &decode_without_scale);
  }
};

}  // namespace

std::unique_ptr<Engine> make_fp8_v_scale_dropped(const EngineConfig& config) {
  return std::make_unique<Fp8VScaleDroppedEngine>(config);
}

}  // namespace kvfuzz::mutants
