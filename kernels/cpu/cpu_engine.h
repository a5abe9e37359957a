// The common frame of the CPU engines: the step loop (validation, position assignment,
// RoPE, storing, one row per token) and the semantic hooks that a mutant overrides.
//
// Per token of a chunk: p = next_position(seq); k is rotated at p and stored (store()
// returns the token's storage index); q is rotated at p; for every q head h the engine's
// attend() computes the row over visible_range(index, chunk_start) of kv head
// kv_head_for(h). Storage indices equal positions in the paged engines and buffer
// indices in the contiguous one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/attention_math.h"
#include "kvfuzz/engine.h"

namespace kvfuzz::cpu {

class CpuEngine : public Engine {
 public:
  explicit CpuEngine(const EngineConfig& config);
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) final;

  // Both storages (contiguous_engine.h, paged_storage_engine.h) truncate and fork.
  EngineCapabilities capabilities() const override { return {.truncate = true, .fork = true}; }
  // Each row is one pass over its keys in position order, whatever the batch, the chunk
  // schedule, the pages or the poison: every invariance but reset holds bit for bit. An
  // engine whose sums depend on more (the flash engine: its path, its split count) claims less.
  BitwiseClaims bitwise_claims() const override {
    return {.batch = true, .schedule = true, .layout = true, .poison = true};
  }

  // Every CPU engine computes every attention feature (soft cap, sinks, ALiBi, chunked
  // local: Layout), caches its keys rotated and rounded to the storage dtype, computes its
  // RoPE angles in double, and by
  // default computes in f32 throughout. declare() gives it other numerics (the rounding of
  // P, f16 value sums, rows rounded to a dtype: numerics_profiles.h) and the supports that
  // go with them, before its first step.
  EngineNumerics numerics() const override { return numerics_; }
  EngineSupports supports() const override { return supports_; }
  void declare(const EngineNumerics& numerics, const EngineSupports& supports);
  // `supports` with every attention feature declared.
  static EngineSupports with_features(EngineSupports supports) {
    for (bool EngineSupports::*feature : kFeatureSupports) supports.*feature = true;
    return supports;
  }

 protected:
  // One (query token, q head) whose row attend() computes.
  struct Query {
    int seq = 0;
    int q_head = 0;
    int64_t index = 0;         // storage index of the query's own key
    int64_t chunk_start = 0;   // storage index of the chunk's first token
    int chunk_tokens = 0;      // 1: the decode path
    const float* q = nullptr;  // the head's RoPE-rotated query, head_dim floats
  };

  // --- storage, implemented by every engine ---
  // Make room for `tokens` more tokens of `seq`; throws EngineError when it cannot.
  virtual void begin_chunk(int seq, int tokens) = 0;
  // The absolute position the next token of `seq` gets.
  virtual int64_t next_position(int seq) const = 0;
  // Store one token's (already rotated) k and v, advance the position, return the storage
  // index of the token. k: [kv_head][head_dim], v: [kv_head][value_dim].
  virtual int64_t store(int seq, const float* k, const float* v) = 0;
  // The row of one q head over `keys` of `kv_head`: value_dim floats to out.
  virtual void attend(const Query& query, int kv_head, KeyRange keys, float* out) = 0;

  // --- semantics (the honest versions; mutants override one) ---
  // Keys a query at storage index `index` sees: the causal prefix, cut by the window.
  virtual KeyRange visible_range(int64_t index, int64_t chunk_start) const;
  // The kv head q head `q_head` reads: q_head / group.
  virtual int kv_head_for(int q_head) const;
  // The layout's soft cap, ALiBi slope and sink for this query's q head, in f32.
  virtual LogitFeatures logit_features(const Query& query) const;
  // The elements RoPE turns in a q or k head: the layout's (Layout::rope_shape).
  virtual RopeShape rope_shape() const { return layout_.rope_shape(); }

  // Throws EngineError unless 0 <= seq < sequences().
  void check_seq(int seq, const char* what) const;
  const Layout& layout() const { return layout_; }
  int sequences() const { return sequences_; }
  float scale() const { return scale_; }
  const Arithmetic& arithmetic() const { return arithmetic_; }
  // Steps so far, the current one included: tells a step's begin_chunk calls apart from the
  // next step's (the flash engine's batch-wide split count).
  uint64_t step_count() const { return step_count_; }

 private:
  void check_chunks(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs);
  void run_chunk(const ChunkIn& chunk, ChunkOut& out);

  Layout layout_;
  int sequences_ = 1;
  float scale_ = 1;
  std::vector<uint64_t> seen_;  // per sequence: the step that last fed it (distinctness)
  uint64_t step_count_ = 0;
  std::vector<float> q_rot_, k_rot_, cos_, sin_;  // per-token scratch
  EngineNumerics numerics_{.rotated_keys_in_storage = true, .rope_angles_exact = true};
  EngineSupports supports_ = with_features(EngineSupports{});
  Arithmetic arithmetic_;
};

}  // namespace kvfuzz::cpu
