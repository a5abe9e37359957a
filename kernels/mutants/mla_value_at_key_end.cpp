// mla-value-at-key-end: the paged engine reading an MLA value (Layout::value_from_key) from
// the last value_dim elements of its key's row instead of the first, as a kernel written
// for a cache row laid out [RoPE part; latent] reads one laid out [latent; RoPE part], as
// FlashMLA's is. Where value_dim equals head_dim the two readings agree, so the bug hides
// in caches without a RoPE part.
#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class MlaValueAtKeyEndEngine final : public Mutant<cpu::PagedEngine> {
 public:
  explicit MlaValueAtKeyEndEngine(const EngineConfig& config) : Mutant(config) {
    // BUG: the value taken from the end of the key's row
    kv_store().set_value_in_key(
        static_cast<size_t>(config.layout.head_dim - config.layout.value_dim));
  }
};

}  // namespace

std::unique_ptr<Engine> make_mla_value_at_key_end(const EngineConfig& config) {
  return std::make_unique<MlaValueAtKeyEndEngine>(config);
}

}  // namespace kvfuzz::mutants
