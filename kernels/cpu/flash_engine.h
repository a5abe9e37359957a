// The flash engine: paged storage read tile by tile (kFlashTileKeys keys decoded into a
// float tile buffer) with online softmax: running max m, sum l and accumulator acc,
// rescaled by exp(m_old - m_new) whenever the max grows.
//
// Dispatch per (query, q head): a one-token chunk is the decode path; when it sees at
// least kFlashSplitThreshold keys, its keys are split into partitions of
// kFlashPartitionKeys, each reduced to its own (m, l, acc), merged by log-sum-exp;
// otherwise one pass. Longer chunks take the prefill path: tiles aligned to multiples of
// kFlashTileKeys in position space, cut by the causal/window mask.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/flash_constants.h"
#include "cpu/paged_storage_engine.h"

namespace kvfuzz::cpu {

// Which path computed each (query token, q head) row.
struct FlashPathCounts {
  int64_t prefill = 0;
  int64_t decode = 0;
  int64_t split_decode = 0;
};

class FlashEngine : public PagedStorageEngine {
 public:
  explicit FlashEngine(const EngineConfig& config);
  const FlashPathCounts& path_counts() const { return counts_; }
  // Bit for bit across batches, pages and poison, but not across chunk schedules: a token
  // decoded alone takes the decode (or split) path, in a longer chunk the prefill path,
  // whose sums run in another order.
  BitwiseClaims bitwise_claims() const override {
    BitwiseClaims claims = PagedStorageEngine::bitwise_claims();
    claims.schedule = false;
    return claims;
  }

 protected:
  void attend(const Query& query, int kv_head, KeyRange keys, float* out) override;

 private:
  // Online softmax over keys, in tiles [t, t + kFlashTileKeys) for t = first_tile + i *
  // kFlashTileKeys, each cut to keys. Updates (m, l) and acc (value_dim floats).
  void online_pass(const Query& query, int kv_head, KeyRange keys, int64_t first_tile, float& m,
                   float& l, float* acc);
  void split_decode(const Query& query, int kv_head, KeyRange keys, float* out);

  std::vector<float> tile_k_, tile_v_, tile_s_;    // one tile, decoded to float
  std::vector<float> tile_run_;                    // the tile's f16 value sums
  std::vector<float> part_m_, part_l_, part_acc_;  // split decode: per partition
  FlashPathCounts counts_;
};

}  // namespace kvfuzz::cpu
