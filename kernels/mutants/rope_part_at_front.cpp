// rope-part-at-front: the paged engine declaring RoPE on part of the head (Layout::rope_dims)
// and turning the head's *first* rope_dims elements instead of its last: GPT-NeoX's partial
// rotary convention (rotary_ndims from the front, as ggml_rope_ext's n_dims) applied to an
// MLA cache row laid out [latent; RoPE part], as DeepSeek's and FlashMLA's is. The angles
// are the part's (theta^(-2i / rope_dims)); only which elements turn is wrong, so a layout
// whose part is the whole head, or a position-0 row, hides it. Under MLA the value is then
// read from rotated elements too.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class RopePartAtFrontEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

 protected:
  RopeShape rope_shape() const override {
    const RopeShape right = layout().rope_shape();
    return {right.dims, right.dims, right.style};  // BUG: the part counted from element 0
  }
};

}  // namespace

std::unique_ptr<Engine> make_rope_part_at_front(const EngineConfig& config) {
  return std::make_unique<RopePartAtFrontEngine>(config);
}

}  // namespace kvfuzz::mutants
