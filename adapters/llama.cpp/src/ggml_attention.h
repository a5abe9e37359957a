// ggml's attention as a kvfuzz attention engine (kvfuzz/engine.h): the K/V cache held in
// tensors of a ggml type, appended to by the adapter, and every step one ggml graph computed
// on ggml's CPU backend with, per chunk, either
//   flash   ggml_flash_attn_ext over views of the cache (mask, max_bias for ALiBi,
//           logit_softcap, ggml_flash_attn_ext_add_sinks): llama.cpp's default on the CPU;
//   matmul  mul_mat(k, q), the soft cap as scale / tanh / scale, ggml_soft_max_ext (mask,
//           max_bias, sinks by ggml_soft_max_add_sinks), mul_mat with the transposed V
//           cache: llama.cpp's path with flash attention off (build_attn_mha).
// What llama.cpp's model code adds around them (the mask built for the step, RoPE, which cache
// cells a sequence owns) is the adapter's: README.md, "The ggml attention engines".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvfuzz/engine.h"

namespace kvfuzz::ggml_attention {

enum class Path { flash, matmul };

// Deliberate mistakes for the negative controls: each breaks one mapping from kvfuzz's
// layout to ggml's arguments, the rest stays honest.
struct Bugs {
  bool window_one_more = false;        // the mask lets the window see one key too many
  bool softcap_unscaled = false;       // logit_softcap given the cap of scale * q.k to raw q.k
  bool sinks_reversed = false;         // the sink logits of the q heads in reverse order
  bool alibi_own_as_standard = false;  // every ALiBi layout as ggml's max_bias 8 schedule
  bool kv_heads_reversed = false;      // K of kv head g stored in kv head kv_heads - 1 - g's place
  bool k_as_q4_0 = false;              // a K block format other than q4_0 stored as q4_0
  // An honest engine that does not declare query_blocks: the judge then expects q.k with
  // the exact query, which ggml's q8_0 conversion of q misses by far more than noise.
  bool query_blocks_undeclared = false;
  // MLA (value_from_key): V viewed at the key row's last value_dim elements instead of its
  // first (a view offset counted from the wrong end of a [latent | RoPE part] row).
  bool mla_value_at_key_end = false;
};

struct Options {
  Path path = Path::flash;
  DType dtype = DType::f16;  // the layouts' storage dtype, the cache's type when unquantized
  int threads = 1;
  Bugs bugs;
};

class GgmlAttentionEngine final : public Engine {
 public:
  GgmlAttentionEngine(const EngineConfig& config, const Options& options);
  ~GgmlAttentionEngine() override;

  EngineCapabilities capabilities() const override { return {.truncate = true, .fork = true}; }
  EngineNumerics numerics() const override;
  EngineSupports supports() const override;
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override;
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;
  void fork(int src, int dst) override;

 private:
  struct Sequence;
  Sequence& sequence(int seq);
  EngineConfig config_;
  Options options_;
  std::vector<Sequence> sequences_;
};

// What an engine with these options declares for a layout (numerics() and supports()
// return these): the numerics follow the layout's K and V formats.
EngineNumerics declared_numerics(const Options& options, const Layout& layout);
EngineSupports declared_supports(const Options& options);

// ggml-flash-{f32,f16,bf16}, ggml-matmul-{f32,f16,bf16}, and the negative controls.
std::vector<EngineInfo> engines();

}  // namespace kvfuzz::ggml_attention
