// The paged engine: paged storage, and single-pass attention per (query, q head) over the
// visible slots only (scores, max, exp, sum, weighted sum).
#pragma once

#include <vector>

#include "cpu/paged_storage_engine.h"

namespace kvfuzz::cpu {

class PagedEngine : public PagedStorageEngine {
 public:
  using PagedStorageEngine::PagedStorageEngine;

 protected:
  // The last slot a decode query (one-token chunk) reads: honestly its own, keys.hi.
  virtual int64_t decode_read_last(int seq, KeyRange keys) const;

  void attend(const Query& query, int kv_head, KeyRange keys, float* out) override;

 private:
  AttentionScratch scratch_;
};

}  // namespace kvfuzz::cpu
