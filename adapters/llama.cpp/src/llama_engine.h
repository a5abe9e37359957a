// llama.cpp as a kvfuzz model engine (kvfuzz/model_engine.h): the scenario's model written
// as a GGUF "llama" model (gguf_export.h), loaded by llama.cpp, and driven through llama.h's
// public API as a server drives it: one llama_batch per step holding every chunk's tokens
// (its sequence id, the position this adapter assigns, logits on for every token), reset as
// removing the sequence, truncate as removing positions >= keep, fork as removing the
// destination and copying the source into it (llama_memory_seq_rm / seq_cp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf_export.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/model_engine.h"

namespace kvfuzz::llama_cpp {

// How the K/V cache stores keys and values (llama_context_params::type_k / type_v).
enum class CacheType { f16, f32 };

// Deliberate mistakes for the negative controls, beside those of the export.
struct EngineBugs {
  ExportBugs model;
  // Each keeps llama.cpp's batches consistent (its positions continue the sequence), so
  // that the mistake shows as wrong rows, not as a refused llama_decode.
  bool truncate_keeps_one_more = false;  // keeps keep + 1 tokens, continues at keep + 1
  bool fork_without_copy = false;        // empties dst and starts it at 0
  // A K cache in a ggml block format other than q4_0 made as q4_0 (--cache-type-k mapped
  // wrong): the keys lose three bits against the format the scenario names.
  bool k_as_q4_0 = false;
};

// Whether llama.cpp computes attention with its flash-attention op (ggml_flash_attn_ext) or
// with mul_mat, softmax, mul_mat (llama_context_params::flash_attn_type).
enum class Attention {
  automatic,  // llama.cpp's default (LLAMA_FLASH_ATTN_TYPE_AUTO): flash attention on the CPU
  unfused,    // LLAMA_FLASH_ATTN_TYPE_DISABLED
};

struct EngineOptions {
  CacheType cache = CacheType::f16;
  Attention attention = Attention::automatic;
  EngineBugs bugs;
};

// Tokens one (sequence, epoch) may hold: llama.cpp's per-sequence context (n_ctx / n_seq_max).
inline constexpr int kContextPerSequence = 1024;

class LlamaCppEngine final : public ModelEngine {
 public:
  // Makes nothing yet: the first step, reset, truncate or fork writes and loads the model
  // and throws EngineError when the layout cannot be expressed or llama.cpp cannot load
  // the model or make the context (the message carries llama.cpp's last error line).
  LlamaCppEngine(const ModelEngineConfig& config, const EngineOptions& options);
  ~LlamaCppEngine() override;

  EngineCapabilities capabilities() const override { return {.truncate = true, .fork = true}; }
  EngineNumerics numerics() const override;
  EngineSupports supports() const override;
  void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) override;
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;
  void fork(int src, int dst) override;

 private:
  struct State;
  State& state();  // made at the first call
  std::unique_ptr<State> state_;
  ModelEngineConfig config_;
  EngineOptions options_;
  std::vector<int64_t> length_;  // next position of every sequence
};

// What an engine with these options declares for a layout (numerics() and supports() return
// these).
EngineNumerics declared_numerics(const EngineOptions& options, const Layout& layout);
EngineSupports declared_supports(const EngineOptions& options);

// The adapter's engines: llama-cpp (llama.cpp's defaults: f16 cache, flash attention),
// llama-cpp-unfused (f16 cache, no flash attention) and llama-cpp-f32 (f32 cache, no flash
// attention: with it llama.cpp casts an f32 cache to f16, docs/findings/llama.cpp.md).
std::vector<EngineInfo> engines();

}  // namespace kvfuzz::llama_cpp
