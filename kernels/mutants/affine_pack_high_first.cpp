// affine-pack-high-first: the flash engine that unpacks an affine group's quants from the
// top of each 32-bit word down (element k of a word from bits [32 - (k + 1) * bits,
// 32 - k * bits)), where MLX packs element k from bit k * bits up (mlx::core::quantize's
// `out_el |= q << (k * bits)`). A kernel that reads the words as big-endian fields, or walks
// a word with a left shift, gets this wrong; the scale and bias are read right.
#include <vector>

#include "cpu/flash_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

constexpr size_t kHeader = 8;  // f32 scale, f32 bias (kvfuzz/kv_format.h, row_bytes)
constexpr size_t kWord = 4;

void decode_high_first(const KvFormat& format, int kv_head, const uint8_t* in, int n, float* out) {
  if (!is_affine(format.quant)) return decode_row(format, kv_head, in, n, out);
  const auto group = static_cast<size_t>(format.group);
  const size_t bytes = row_bytes(format, format.group);  // one group's
  std::vector<uint8_t> fixed(bytes);
  for (size_t g = 0; g < static_cast<size_t>(n) / group; ++g) {
    const uint8_t* at = in + g * bytes;
    std::copy_n(at, bytes, fixed.begin());
    const int bits = affine_bits(format.quant);
    const uint32_t mask = (1u << bits) - 1;
    for (size_t w = kHeader; w < bytes; w += kWord) {
      uint32_t word = 0;
      for (size_t b = 0; b < kWord; ++b) word |= static_cast<uint32_t>(at[w + b]) << (8 * b);
      uint32_t reversed = 0;  // BUG: element k taken from the word's top end
      for (int k = 0; k < 32 / bits; ++k) {
        const uint32_t q = (word >> (32 - (k + 1) * bits)) & mask;
        reversed |= q << (k * bits);
      }
      for (size_t b = 0; b < kWord; ++b) fixed[w + b] = static_cast<uint8_t>(reversed >> (8 * b));
    }
    decode_row(format, kv_head, fixed.data(), format.group, out + g * group);
  }
}

class AffinePackHighFirstEngine final : public Mutant<cpu::FlashEngine> {
 public:
  explicit AffinePackHighFirstEngine(const EngineConfig& config) : Mutant(config) {
    kv_store().set_decoders(&decode_high_first, &decode_high_first);
  }
};

}  // namespace

std::unique_ptr<Engine> make_affine_pack_high_first(const EngineConfig& config) {
  return std::make_unique<AffinePackHighFirstEngine>(config);
}

}  // namespace kvfuzz::mutants
