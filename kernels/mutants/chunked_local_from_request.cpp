// chunked-local-from-request: the paged engine that counts chunked local attention's chunks
// from the position where the request's first fed chunk began instead of from position 0,
// as a kernel that aligns chunks to the start of its ragged batch entry. A request that
// starts at position 0 is right; one that continues a cache (after a truncate or a fork,
// at a position that is no multiple of the chunk size) sees the wrong keys.
#include <algorithm>
#include <vector>

#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

class ChunkedLocalFromRequestEngine final : public Mutant<cpu::PagedEngine> {
 public:
  explicit ChunkedLocalFromRequestEngine(const EngineConfig& config)
      : Mutant(config),
        origin_(static_cast<size_t>(sequences()), 0),
        fresh_(static_cast<size_t>(sequences()), true) {}

  void reset(int seq) override {
    PagedEngine::reset(seq);
    fresh_[static_cast<size_t>(seq)] = true;
  }
  void truncate(int seq, int64_t keep) override {
    PagedEngine::truncate(seq, keep);
    fresh_[static_cast<size_t>(seq)] = true;
  }
  void fork(int src, int dst) override {
    PagedEngine::fork(src, dst);
    fresh_[static_cast<size_t>(dst)] = true;
  }

 protected:
  void begin_chunk(int seq, int tokens) override {
    check_seq(seq, "step");
    if (fresh_[static_cast<size_t>(seq)]) {
      origin_[static_cast<size_t>(seq)] = next_position(seq);
      fresh_[static_cast<size_t>(seq)] = false;
    }
    PagedEngine::begin_chunk(seq, tokens);
  }

  void attend(const Query& query, int kv_head, cpu::KeyRange keys, float* out) override {
    if (const auto size = layout().chunked_local) {
      // BUG: chunks counted from the request's first position, not from 0
      const int64_t origin = origin_[static_cast<size_t>(query.seq)];
      const int64_t window_lo =
          layout().window ? std::max<int64_t>(0, query.index - *layout().window + 1) : 0;
      keys.lo = std::max(window_lo, origin + (query.index - origin) / *size * *size);
    }
    PagedEngine::attend(query, kv_head, keys, out);
  }

 private:
  std::vector<int64_t> origin_;
  std::vector<bool> fresh_;
};

}  // namespace

std::unique_ptr<Engine> make_chunked_local_from_request(const EngineConfig& config) {
  return std::make_unique<ChunkedLocalFromRequestEngine>(config);
}

}  // namespace kvfuzz::mutants
