// The contiguous engine: per sequence, K and V grow in one buffer as tokens arrive, and a
// separate position counter drives RoPE and the reported positions. The attention range is
// computed from buffer indices: the query at buffer index i sees entries
// [max(0, i - window + 1), i]. An honest reset clears both the buffer and the counter; an
// honest truncate shrinks the buffer to `keep` entries and sets the counter to `keep`; fork
// copies the source's buffer and counter.
#pragma once

#include <vector>

#include "cpu/cpu_engine.h"
#include "cpu/kv_array.h"

namespace kvfuzz::cpu {

class ContiguousEngine : public CpuEngine {
 public:
  explicit ContiguousEngine(const EngineConfig& config);
  // Every CPU engine's supports, and keys quantized by channel (kv_format.h: channel_u8,
  // channel_u4): K held in f32, each key as stored in the layout's dtype until the buffer
  // holds its group whole, then the group's read-back values (quantize_group) in its place.
  EngineSupports supports() const override {
    EngineSupports supports = CpuEngine::supports();
    supports.kv_channel = true;
    return supports;
  }
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;
  void fork(int src, int dst) override;

 protected:
  void clear_kv(int seq);        // drop the sequence's K/V buffer
  void clear_position(int seq);  // the next token gets position 0
  // Keep the first `keep` buffer entries; EngineError unless 0 <= keep <= entries.
  void shrink_kv(int seq, int64_t keep);
  void set_position(int seq, int64_t position);  // the next token gets `position`

  void begin_chunk(int seq, int tokens) override;
  int64_t next_position(int seq) const override;
  int64_t store(int seq, const float* k, const float* v) override;
  void attend(const Query& query, int kv_head, KeyRange keys, float* out) override;
  // Per-channel keys: whether a buffer of `entries` keys has just made a group whole, and a
  // whole group's `count` keys of n elements (one kv head) quantized in place (quantize_group).
  virtual bool makes_group_whole(int64_t entries) const;
  virtual void quantize_keys(float* keys, int count, int n) const;

 private:
  struct Sequence {
    KvArray k, v;          // [buffer index][kv_head][head_dim / value_dim]; MLA: no v
    int64_t tokens = 0;    // buffer entries
    int64_t position = 0;  // position of the next token
  };
  // A per-channel key group just made whole (the buffer's last `group` entries): quantized
  // in place.
  void quantize_last_group(Sequence& s);

  std::vector<Sequence> seqs_;
  AttentionScratch scratch_;
  std::vector<float> key_, group_;  // store()'s rounded key, a group's keys of one kv head
};

}  // namespace kvfuzz::cpu
