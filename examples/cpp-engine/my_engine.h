// MyEngine: a small KV-cached attention engine written from scratch against
// kvfuzz/engine.h, the example of docs/writing-an-engine.md.
//
// Per sequence it keeps a contiguous cache (K already rotated by RoPE, V as given) and the
// position of its next token. A step appends each chunk's tokens to its sequence and
// returns, for every token and q head, softmax(scale * q.k) over the keys the token may
// see, weighted by V: its own and every earlier one of the sequence, cut by the sliding
// window. kvfuzz never tells an engine positions; MyEngine reports the position it gave
// each token, and kvfuzz compares every row with full-prefix attention at that position.
//
// It announces truncate (speculative decoding's rollback) and not fork, so kvfuzz
// generates no forks for it and skips fixtures that fork, naming the missing capability.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvfuzz/engine.h"

class MyEngine : public kvfuzz::Engine {
 public:
  explicit MyEngine(const kvfuzz::EngineConfig& config);

  kvfuzz::EngineCapabilities capabilities() const override;
  void step(std::span<const kvfuzz::ChunkIn> chunks, std::span<kvfuzz::ChunkOut> outs) override;
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;

 protected:
  // The first cache entry that the token at cache entry `entry` may see, when its chunk
  // starts at entry `chunk_start`: the whole causal prefix, cut by the window. (A virtual
  // only so that buggy_engine.h can get it wrong.)
  virtual int64_t first_visible(int64_t entry, int64_t chunk_start) const;

 private:
  struct Sequence {
    std::vector<float> k;       // [entry][kv_head][head_dim], rotated at the entry's position
    std::vector<float> v;       // [entry][kv_head][value_dim]
    int64_t entries = 0;        // tokens in the cache
    int64_t next_position = 0;  // the position the next token gets
  };

  Sequence& sequence(int seq, const char* what);
  void append_chunk(const kvfuzz::ChunkIn& chunk, kvfuzz::ChunkOut& out);
  // RoPE, NeoX half split: pairs (x[i], x[i + d/2]) rotate by position * theta^(-2i/d).
  void rotate(float* x, int64_t position) const;
  // One q head's row over cache entries [first, last] of `kv_head`: value_dim floats.
  void attend(const Sequence& s, const float* q, int kv_head, int64_t first, int64_t last,
              float* out);

  kvfuzz::Layout layout_;
  float scale_;
  std::vector<Sequence> sequences_;
  std::vector<float> scores_;  // scratch of attend()
};
