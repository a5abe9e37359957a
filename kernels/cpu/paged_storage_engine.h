// The storage half of the paged and flash engines: one PagedKvStore, the position of a
// token is its slot in the sequence (length before the append), reset releases the pages,
// truncate and fork are the store's (reference-counted pages, copy-on-write).
// Subclasses add only attend().
#pragma once

#include "cpu/cpu_engine.h"
#include "cpu/page_pool.h"

namespace kvfuzz::cpu {

class PagedStorageEngine : public CpuEngine {
 public:
  explicit PagedStorageEngine(const EngineConfig& config);
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;
  void fork(int src, int dst) override;

  const PagedKvStore& kv() const { return kv_; }

 protected:
  PagedKvStore& kv_store() { return kv_; }
  void begin_chunk(int seq, int tokens) override { kv_.reserve(seq, tokens); }
  int64_t next_position(int seq) const override { return kv_.length(seq); }
  int64_t store(int seq, const float* k, const float* v) override { return kv_.append(seq, k, v); }

 private:
  PagedKvStore kv_;
};

}  // namespace kvfuzz::cpu
