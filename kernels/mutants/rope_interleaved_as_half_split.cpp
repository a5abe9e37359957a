// rope-interleaved-as-half-split: the paged engine declaring RoPE's interleaved pairs
// (Layout::rope_style) and turning the half-split ones, (x_i, x_{i+d/2}), whatever the layout
// says: a kernel that ignores vLLM's is_neox_style=False, or a GGUF Llama's weights (made for
// ggml's interleaved mode) run through a NeoX rotation. Both keys and queries are turned the
// same wrong way, so the scores stay dot products of rotations at the right angles, of the
// wrong pairs: only the position dependence is wrong, and at position 0 nothing is.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

EngineConfig half_split(EngineConfig config) {
  config.layout.rope_style = RopeStyle::half_split;  // BUG: the layout's pairs ignored
  return config;
}

class RopeInterleavedAsHalfSplitEngine final : public Mutant<cpu::PagedEngine> {
 public:
  explicit RopeInterleavedAsHalfSplitEngine(const EngineConfig& config)
      : Mutant(half_split(config)) {}
};

}  // namespace

std::unique_ptr<Engine> make_rope_interleaved_as_half_split(const EngineConfig& config) {
  return std::make_unique<RopeInterleavedAsHalfSplitEngine>(config);
}

}  // namespace kvfuzz::mutants
