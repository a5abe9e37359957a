// The flash engine: paged storage read tile by tile (kFlashTileKeys keys decoded into a
// float tile buffer) with online softmax: running max m, sum l and accumulator acc,
// rescaled by exp(m_old - m_new) whenever the max grows.
//
// Dispatch per (query, q head): a one-token chunk is the decode path; when it sees at
// least kFlashSplitThreshold keys, its keys are split into partitions of
// kFlashPartitionKeys, each reduced to its own (m, l, acc), merged by log-sum-exp;
// otherwise one pass. Longer chunks take the prefill path: tiles aligned to multiples of
// kFlashTileKeys in position space, cut by the causal/window mask.
//
// FlashSplit chooses what fixes the split decode's partitions. By default the row's own
// context (no partition is ever empty). Real decode kernels often fix them by something
// else: the longest decode context of the batch (vLLM-style: partitions of a fixed size,
// as many as the longest row needs) or a fixed number of splits over it (FlashDecoding's
// num_splits, each split rounded up to whole tiles). Then a shorter row of the batch has
// empty partitions (max -inf, sum 0), and a row below the split threshold takes the split
// path because a neighbour is above it. Honest either way: an empty partition's merge
// weight exp(-inf - m) is 0.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/flash_constants.h"
#include "cpu/paged_storage_engine.h"

namespace kvfuzz::cpu {

// Which path computed each (query token, q head) row.
// What fixes the number of partitions of the split decode path (see above).
enum class SplitCount {
  own_context,    // ceil(keys / kFlashPartitionKeys) partitions, when keys >= the threshold
  batch_longest,  // ceil(L / kFlashPartitionKeys), L the step's longest decode context
  fixed,          // fixed_parts splits of ceil(L / fixed_parts) keys, rounded up to tiles
};

struct FlashSplit {
  SplitCount count = SplitCount::own_context;
  int fixed_parts = 4;
};

struct FlashPathCounts {
  int64_t prefill = 0;
  int64_t decode = 0;
  int64_t split_decode = 0;
};

class FlashEngine : public PagedStorageEngine {
 public:
  explicit FlashEngine(const EngineConfig& config, FlashSplit split = {});
  const FlashPathCounts& path_counts() const { return counts_; }
  // Empty partitions seen by the split path (only when the split count is not the row's).
  int64_t empty_partitions() const { return empty_partitions_; }
  // Bit for bit across batches, pages and poison, but not across chunk schedules: a token
  // decoded alone takes the decode (or split) path, in a longer chunk the prefill path,
  // whose sums run in another order.
  BitwiseClaims bitwise_claims() const override {
    BitwiseClaims claims = PagedStorageEngine::bitwise_claims();
    claims.schedule = false;
    // A split count fixed by the batch's longest row changes a row's sums with its batch.
    claims.batch = split_.count == SplitCount::own_context;
    return claims;
  }

 protected:
  void attend(const Query& query, int kv_head, KeyRange keys, float* out) override;
  void begin_chunk(int seq, int tokens) override;
  // The log-sum-exp merge of the split path's first `parts` partitions (part_m, part_l,
  // part_acc; partition p holds keys [keys.lo + p size, ...] cut to keys) into out: every
  // partition rescaled to the largest max. Mutants override it.
  virtual void merge_partitions(size_t parts, KeyRange keys, int64_t size, float* out);
  // The logit of a key on the split decode path: the row's features, as on every path.
  // Mutants override it.
  virtual float split_logit(const LogitFeatures& features, float score, int64_t key) const {
    return features.logit(score, key);
  }
  const std::vector<float>& part_m() const { return part_m_; }
  const std::vector<float>& part_l() const { return part_l_; }
  const std::vector<float>& part_acc() const { return part_acc_; }

 private:
  // Online softmax over keys, in tiles [t, t + kFlashTileKeys) for t = first_tile + i *
  // kFlashTileKeys, each cut to keys. Updates (m, l) and acc (value_dim floats).
  void online_pass(const Query& query, int kv_head, KeyRange keys, int64_t first_tile, float& m,
                   float& l, float* acc);
  // The same for P normalised before it is rounded (Arithmetic::normalised_p): two sweeps.
  void normalised_pass(const Query& query, int kv_head, KeyRange keys, int64_t first_tile, float& m,
                       float& l, float* acc);
  // Keys [a, b] of kv_head into the tile buffers, their scores in tile_s_; returns b - a + 1.
  size_t load_tile(const Query& query, int kv_head, int64_t a, int64_t b);
  // acc += weights[i] * the tile's value i, for its first n keys (in f16 runs when the
  // values sum in f16).
  void accumulate_tile(size_t n, const float* weights, float* acc);
  // The log-sum-exp combine of normalised partitions (Arithmetic::lse_combine) into out.
  void lse_combine(size_t parts, float* out);
  // Partitions of `size` keys from keys.lo, `parts` of them (some may lie past keys.hi).
  void split_decode(const Query& query, int kv_head, KeyRange keys, int64_t size, int64_t parts,
                    float* out);

  std::vector<float> tile_k_, tile_v_, tile_s_;    // one tile, decoded to float
  std::vector<float> tile_run_;                    // the tile's f16 value sums
  std::vector<float> part_m_, part_l_, part_acc_;  // split decode: per partition
  std::vector<float> part_lse_;                    // ... and its lse for lse_combine
  FlashPathCounts counts_;
  FlashSplit split_;
  int64_t step_longest_ = 0;  // the longest decode context of step step_longest_at_
  uint64_t step_longest_at_ = 0;
  int64_t empty_partitions_ = 0;
  LogitFeatures features_;  // the row attend() is computing
  bool on_split_ = false;   // ... on the split decode path
};

}  // namespace kvfuzz::cpu
