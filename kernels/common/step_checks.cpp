#include "common/step_checks.h"

#include <string>

namespace kvfuzz::common {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw EngineError(message);
}

}  // namespace

void check_engine_config(const EngineConfig& config) {
  const Layout& l = config.layout;
  require(
      l.q_heads >= 1 && l.kv_heads >= 1 && l.head_dim >= 1 && l.value_dim >= 1 && l.page_size >= 1,
      "invalid layout: q_heads, kv_heads, head_dim, value_dim and page_size must be >= 1");
  require(l.q_heads % l.kv_heads == 0, "invalid layout: kv_heads (" + std::to_string(l.kv_heads) +
                                           ") must divide q_heads (" + std::to_string(l.q_heads) +
                                           ")");
  require(!l.window || *l.window >= 1, "invalid layout: window must be >= 1");
  require(!l.rope_theta || *l.rope_theta > 0, "invalid layout: rope_theta must be > 0");
  require(config.sequences >= 1,
          "invalid engine config: sequences must be >= 1, got " + std::to_string(config.sequences));
}

void check_sequence(int seq, int sequences, const char* what) {
  require(seq >= 0 && seq < sequences, std::string(what) + ": sequence " + std::to_string(seq) +
                                           " out of range (engine has " +
                                           std::to_string(sequences) + " sequences)");
}

void check_step_input(const Layout& layout, int sequences, std::span<const ChunkIn> chunks,
                      std::span<ChunkOut> outs, std::vector<uint64_t>& seen, uint64_t step) {
  require(outs.size() == chunks.size(), "step: " + std::to_string(chunks.size()) + " chunks but " +
                                            std::to_string(outs.size()) + " outputs");
  for (const ChunkIn& c : chunks) {
    check_sequence(c.seq, sequences, "step");
    uint64_t& last = seen[static_cast<size_t>(c.seq)];
    require(last != step,
            "step: sequence " + std::to_string(c.seq) + " appears in two chunks of one step");
    last = step;
    require(c.tokens >= 0, "step: negative token count");
    const auto t = static_cast<size_t>(c.tokens);
    require(c.q.size() == t * static_cast<size_t>(layout.q_heads * layout.head_dim) &&
                c.k.size() == t * static_cast<size_t>(layout.kv_heads * layout.head_dim) &&
                c.v.size() == t * static_cast<size_t>(layout.kv_heads * layout.value_dim),
            "step: q/k/v sizes of sequence " + std::to_string(c.seq) + " do not match " +
                std::to_string(c.tokens) + " tokens of the layout");
  }
}

}  // namespace kvfuzz::common
