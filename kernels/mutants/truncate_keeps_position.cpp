// truncate-keeps-position: the contiguous engine whose truncate shrinks the K/V buffer but
// leaves the position counter ahead, so the next token is reported (and RoPE-rotated) at
// the old length instead of at `keep`.
#include "cpu/contiguous_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class TruncateKeepsPositionEngine final : public Mutant<cpu::ContiguousEngine> {
 public:
  using Mutant::Mutant;

  void truncate(int seq, int64_t keep) override {
    check_seq(seq, "truncate");
    shrink_kv(seq, keep);  // BUG: the position counter is not moved back to keep
  }
};

}  // namespace

std::unique_ptr<Engine> make_truncate_keeps_position(const EngineConfig& config) {
  return std::make_unique<TruncateKeepsPositionEngine>(config);
}

}  // namespace kvfuzz::mutants
