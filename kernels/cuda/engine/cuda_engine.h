// The CUDA engines: a paged cache in device memory (DeviceKvPool) and the kernels of
// kernels/cuda run as a serving engine runs them, on the device in a device build and on
// the SIMT launcher everywhere else. Per step: the new tokens' q/k/v go to the device;
// append_kv rotates and stores K/V at the slots the engine's block tables give them, at
// the positions its own counters give them; rope_queries rotates q; then a step of
// one-token chunks only is a decode (paged_decode_split + paged_decode_merge, split-K
// over the batch's longest context), any other step one chunked_prefill over all chunks
// (a decode row in a mixed batch is a chunk of one). Reset, truncate and fork work on the
// block tables, with copy-on-write and poisoning done by kernels on the device pool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cuda/engine/device_kv_pool.h"
#include "cuda/engine/device_memory.h"
#include "cuda/logit_features.cuh"
#include "kvfuzz/engine.h"

namespace kvfuzz::cuda {

struct CudaEngineOptions {
  // Declared and computed: output dtype and P's rounding (f32 sums throughout, rotated
  // keys stored in the storage dtype, RoPE angles in double), and the supports.
  EngineNumerics numerics;
  EngineSupports supports;
  // KernelFault bits (cuda/paged_kv.cuh): 0 for honest engines; a mutant sets one.
  int faults = 0;
  // The pool's pages past 2^32 elements (DeviceKvPool): the 32-bit offset mutant needs it.
  bool wide_pool = false;
};

// The numerics and supports of the two built-in CUDA engines: f32 rows over any storage
// dtype, and FlashAttention-2's bf16 (P and rows rounded to bf16, bf16 storage only).
CudaEngineOptions cuda_f32_options();
CudaEngineOptions cuda_bf16_options();

class CudaEngine : public Engine {
 public:
  CudaEngine(const EngineConfig& config, CudaEngineOptions options);

  EngineCapabilities capabilities() const override { return {.truncate = true, .fork = true}; }
  // Page size and order change no arithmetic (tiles and splits follow positions), poison
  // is never read; the batch sets decode's split count and the schedule picks decode or
  // prefill, so those two are kept to the tolerance only.
  BitwiseClaims bitwise_claims() const override;
  EngineNumerics numerics() const override { return options_.numerics; }
  EngineSupports supports() const override { return options_.supports; }

  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override;
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;
  void fork(int src, int dst) override;

  const DeviceKvPool& pool() const { return pool_; }

 private:
  void check_step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs);
  // Uploads the step's tokens, stores their K/V and rotates their q into q_rot_.
  void store_tokens(std::span<const ChunkIn> chunks, std::span<const int64_t> first_pos,
                    int tokens);
  void decode(std::span<const ChunkIn> chunks);
  void prefill(std::span<const ChunkIn> chunks, std::span<const int64_t> first_pos, int tokens);
  // The layout's attention features for a launch: the cap and chunk size, and the ALiBi
  // slopes and sink logits (per q head) in features_ on the device.
  LogitFeatures logit_features() const;

  Layout layout_;
  CudaEngineOptions options_;
  float scale_ = 1;
  DeviceKvPool pool_;
  std::vector<uint64_t> seen_;  // per sequence: the step that last fed it
  ThreadSchedule threads_;      // the SIMT launcher's thread order (EngineConfig::threads)
  uint64_t step_count_ = 0;
  // Per-step host staging and device scratch.
  std::vector<float> host_q_, host_k_, host_v_, host_cos_, host_sin_, host_out_;
  std::vector<long long> host_slots_;
  std::vector<int> host_ints_;
  DeviceBuffer q_, k_, v_, cos_, sin_, slots_, q_rot_, out_, ints_;
  DeviceBuffer partial_out_, partial_stats_;
  DeviceBuffer features_;  // [q_heads] ALiBi slopes, then [q_heads] sink logits, as present
};

}  // namespace kvfuzz::cuda
