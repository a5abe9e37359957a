// q4_0-nibbles-swapped: the flash engine that unpacks a q4_0 block's nibbles the other way
// round: element j from the high nibble of byte j and element j + 16 from the low one,
// where ggml packs element j low (block_q4_0, quantize_row_q4_0_ref). A kernel with its own
// unpacking loop gets this wrong when it reads the bytes as 32 interleaved pairs.
#include <array>

#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

constexpr size_t kQ4Block = 18;  // f16 d, then 16 bytes of nibbles

void decode_nibbles_swapped(const KvFormat& format, int kv_head, const uint8_t* in, int n,
                            float* out) {
  if (format.quant != KvQuant::q4_0) return decode_row(format, kv_head, in, n, out);
  std::array<uint8_t, kQ4Block> block{};
  for (int b = 0; b < n / kGgmlBlock; ++b) {
    const uint8_t* at = in + static_cast<size_t>(b) * kQ4Block;
    block[0] = at[0];
    block[1] = at[1];
    for (size_t j = 2; j < kQ4Block; ++j) {
      block[j] = static_cast<uint8_t>((at[j] >> 4) | (at[j] << 4));  // BUG: high nibble first
    }
    decode_row(format, kv_head, block.data(), kGgmlBlock,
               out + static_cast<size_t>(b) * kGgmlBlock);
  }
}

class Q40NibblesSwappedEngine final : public Mutant<cpu::FlashEngine> {
 public:
  explicit Q40NibblesSwappedEngine(const EngineConfig& config) : Mutant(config) {
    kv_store().set_decoders(&decode_nibbles_swapped, &decode_nibbles_swapped);
  }
};

}  // namespace

std::unique_ptr<Engine> make_q4_0_nibbles_swapped(const EngineConfig& config) {
  return std::make_unique<Q40NibblesSwappedEngine>(config);
}

}  // namespace kvfuzz::mutants
