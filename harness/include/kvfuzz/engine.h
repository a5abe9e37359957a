// The interface every engine under test implements (the built-in CPU engines and mutants,
// and users' engines behind the plugin and exec doors). An engine owns its cache and its position
// state: the runner gives it only what a real caller gives, the new tokens' q/k/v per op, never
// absolute positions. The engine reports the absolute position it assigned to every row it returns;
// that is where position bugs become observable.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct EngineConfig {
  Layout layout;
  int sequences = 1;
  // Physical pages: the order in which the pool hands them out. Always a permutation of
  // 0..pool_pages-1 (the runner resolves identity / reversed / explicit lists).
  std::vector<int> page_order;
  Poison poison = Poison::nan;
  // The order a kernel launcher on the CPU runs a block's threads in (the CUDA engines on
  // the SIMT launcher); other engines ignore it.
  ThreadSchedule threads;
};

// One sequence's new tokens in a batched forward. Arrays are token-major:
// q[token][q_head][head_dim], k[token][kv_head][head_dim], v[token][kv_head][value_dim],
// already rounded to the layout's dtype.
struct ChunkIn {
  int seq = 0;
  int tokens = 0;
  std::span<const float> q, k, v;
};

// What the engine returns for one chunk: out[token][q_head][value_dim], and the
// absolute position it assigned to each token.
struct ChunkOut {
  std::vector<float> out;
  std::vector<int64_t> positions;
};

// What an engine error is: a refusal or failure (error), or a hazard a kernel checker
// found while the engine ran (the SIMT launcher's race and barrier checks,
// kernels/cuda/simt/simt.h), which the report names as its own kind of failure.
enum class EngineErrorKind { error, race, barrier_divergence };

// Thrown by an engine that cannot carry out a call (pool exhausted, bad sequence...).
struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
  EngineError(EngineErrorKind kind_, const std::string& what)
      : std::runtime_error(what), kind(kind_) {}
  EngineErrorKind kind = EngineErrorKind::error;
};

// Invariances an engine guarantees bit for bit, as deterministic-inference engines do: the
// property's variants must then give rows with exactly the same bits (judge_property
// checks a claimed property with equality instead of its tolerance, and reports the first
// differing value with both bit patterns and their distance in ulps).
//   batch     batch composition and a sequence's place in the batch
//   schedule  the chunk schedule: chunked prefill on or off, where prefill hands over to
//             decode
//   layout    page size and physical page order
//   poison    what the bytes outside the valid prefix hold
struct BitwiseClaims {
  bool batch = false;
  bool schedule = false;
  bool layout = false;
  bool poison = false;
  bool operator==(const BitwiseClaims&) const = default;
};

// How an engine computes, where it departs from "f32 throughout": the judge models what is
// declared (docs/writing-an-engine.md, "Numerics") and tolerates only arithmetic noise, so
// a kernel that rounds its rows to bf16 is judged as an honest bf16 kernel instead of
// failing by half a bf16 ulp. The defaults are an engine that accumulates in f32 and
// returns f32 rows, judged as before numerics could be declared.
struct EngineNumerics {
  // The dtype every returned value is rounded to (round to nearest even). The judge
  // accepts a value when some real number within the arithmetic bound of the reference
  // rounds to it: the bound plus half an ulp of this dtype at the value.
  DType output = DType::f32;
  // The dtype the softmax weights P are rounded to before the P.V product, as
  // FlashAttention-2 does for f16/bf16 inputs (its normaliser sums the unrounded P).
  // Nothing: P stays in the value accumulation's dtype.
  std::optional<DType> p = std::nullopt;
  // The dtype of the running sums of q.k (scores) and of P.V (values): f32 or f16.
  DType score_accumulation = DType::f32;
  DType value_accumulation = DType::f32;
  // With RoPE: whether the engine caches keys after rotating them, rounded to the storage
  // dtype (true; the judge then rounds its rotated keys the same way), caches them
  // unrotated or at f32 precision (false), or does not say (the bound covers both).
  std::optional<bool> rotated_keys_in_storage = std::nullopt;
  // With RoPE: whether the rotated queries are rounded to the storage dtype before q.k (as
  // a kernel handed pre-rotated f16 q and k sees them). Nothing or false: kept in f32.
  std::optional<bool> rotated_queries_in_storage = std::nullopt;
  // With RoPE: whether the angles p * theta^(-2i/d) are computed in double (true; only cos
  // and sin are rounded to f32) or may be in f32 (false or not said: an angle error that
  // grows with the position is tolerated, up to 20 p u radians, which dominates the bound
  // of long contexts).
  std::optional<bool> rope_angles_exact = std::nullopt;
  // An engine that splits a row's keys into partials (split-KV decode) and combines them
  // as normalised outputs O_s with an f32 log-sum-exp each, weighted by exp(lse_s - lse):
  // FlashAttention-2's combine_attn_seqk_parallel, FlashInfer's merge_states, vLLM's
  // merge_attn_states. Such weights sum to 1 only within a few ulps of |lse| (about the
  // largest score), an error the judge then tolerates. false: the partials are combined
  // unnormalised, (m, l, acc) rescaled to the largest m, or the engine does not split.
  bool split_combine_lse = false;
  // The dtype the split partials are stored in before they are combined (FlashInfer's and
  // vLLM's merges take them in the model dtype; FlashAttention-2 keeps them in f32).
  DType split_partials = DType::f32;
  // P is divided by the normaliser before it is rounded to `p` (vLLM's paged attention
  // kernel, ONNX Runtime's Attention in f16): every key's weight rounds, the largest
  // included, and the rounded weights no longer sum to 1. The normaliser may carry an
  // epsilon of up to 1e-6 relative (vLLM divides by sum + 1e-6). false: P is exp(s - m)
  // against the running max and the normaliser sums it unrounded (FlashAttention-2).
  bool p_normalised = false;
  // With RoPE: the dtype the cos/sin tables are rounded to before the rotation, which may
  // then be computed in that dtype too (HF transformers and vLLM cast their tables to the
  // model dtype; flash_attn_with_kvcache takes them in q's dtype). f32: tables in f32 or
  // finer, the rotation in f32.
  DType rope_tables = DType::f32;
  // How far the softmax's exp may be off, in f32 ulps of its result (relative error up to
  // exp_ulps * 2^-23), near underflow by up to 2^-125 absolute. 1: a correctly rounded or
  // faithful exp (std::exp, expf, __expf's 2 ulps aside). Fast polynomial exps are far
  // coarser: torch's CPU flash attention uses Vectorized<float>::fexp_u20, a degree-3
  // polynomial on the exponent bits, up to 940 ulps (1.12e-4 relative) off, and its
  // exp(0) is 0.99995, so the key at the max no longer has P = 1 exactly before rounding.
  int exp_ulps = 1;
  // With K stored in a ggml block format (Layout::k_format q8_0, q4_0, q4_1, q5_0, q5_1):
  // the query is quantized to ggml's q8_0 blocks before q.k (q8_1 for q4_1 and q5_1 keys,
  // whose block sum joins the dot product), as ggml's CPU kernels do: the vec_dot_type of
  // the K type (ggml_flash_attn_ext, mul_mat). The reference quantizes its q the same way
  // (ggml's SIMD quantizers: d = amax / 127 stored as f16, ties to even); where x86's
  // 127 / amax and ARM's 1 / d round an element apart, both are tolerated. No effect on
  // other layouts.
  bool query_blocks = false;
  // A whole-model engine (kvfuzz/model_engine.h) whose weights and activations are in this
  // dtype, as a torch model loaded in bf16 or f16 computes: its weights rounded to it (the
  // reference rounds them the same way, exactly), and every product, norm, residual sum,
  // SwiGLU product, attention output and logit rounded to it (tolerated as one rounding
  // noise at each of those places: harness/src/model/model_tolerance.cpp). f32: weights and
  // activations in f32. An attention engine's is not read: kvfuzz's own forward around it
  // computes in f32.
  DType activations = DType::f32;
  bool operator==(const EngineNumerics&) const = default;
};

// Whether the engine computes as the defaults say: f32 rows, f32 sums, P not rounded (how
// it caches rotated keys aside).
bool computes_in_f32(const EngineNumerics& numerics);

// What an engine can be given: the generator makes only such scenarios, so that an adapter
// never pads, splits or upcasts to fit, and replay skips a fixture outside them.
// 0 means no limit beyond kvfuzz's own (kvfuzz/limits.h).
struct EngineSupports {
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};  // storage dtypes
  int head_dim_multiple = 1;  // head_dim and value_dim are multiples of this
  int max_head_dim = 0;       // head_dim and value_dim at most this
  int max_q_heads = 0;
  int max_context = 0;  // tokens of one (sequence, epoch)
  // Only layouts whose value_dim equals head_dim (kernels with one head size for q, k, v).
  bool value_dim_is_head_dim = false;
  // Only layouts with RoPE (an architecture that always rotates, as llama.cpp's "llama").
  bool rope_required = false;
  // Sliding windows (Layout::window); false: only layouts without one.
  bool windows = true;
  // The attention features (Layout::softcap, sinks, alibi, chunked_local) the engine
  // computes. Off unless declared: an engine is never given a feature it does not name.
  bool softcap = false;
  bool sinks = false;
  bool alibi = false;
  bool chunked_local = false;
  // Quantized KV caches (Layout::k_format, v_format; kvfuzz/kv_format.h) the engine stores:
  // fp8 e4m3fn and e5m2 with their scales, ggml's blocks q8_0, q4_0, q4_1, q5_0, q5_1, and
  // MLX's affine groups affine2, affine4, affine8. Off unless declared, as the features above.
  bool kv_fp8 = false;
  bool kv_ggml_blocks = false;
  bool kv_affine = false;
  // Keys quantized by channel over groups of positions (channel_u8, channel_u4: OpenVINO's
  // BY_CHANNEL keys, KIVI's). Off unless declared.
  bool kv_channel = false;
  // Where an engine stores quantized KV caches more narrowly than kvfuzz's formats allow, as
  // vLLM's, FlashInfer's and SGLang's kv_cache_dtype does: K and V in one format, both or
  // neither (kv_one_format), and each fp8 cache with one scale for the tensor, not one per
  // kv head (kv_tensor_scales). Off: every combination the formats above allow.
  bool kv_one_format = false;
  bool kv_tensor_scales = false;
  // Multi-head latent attention's shared row (Layout::value_from_key): the engine reads each
  // value from its key's stored row. Off unless declared.
  bool value_from_key = false;
  // RoPE's interleaved pairs (Layout::rope_style, GPT-J's and ggml's normal mode). Off unless
  // declared: an engine that says nothing is given RoPE in half-split pairs only.
  bool rope_interleaved = false;
  // RoPE on the head's last Layout::rope_dims elements only (MLA's decoupled RoPE part, and
  // with value_from_key the RoPE that MLA layouts then carry). Off unless declared: an
  // engine that says nothing is given RoPE over the whole head only.
  bool rope_dims = false;
  bool operator==(const EngineSupports&) const = default;
};

// The supports that widen the layouts (the attention features, off by default), as
// opposed to the others, whose non-default values narrow them.
inline constexpr std::array<bool EngineSupports::*, 10> kFeatureSupports{
    &EngineSupports::softcap,
    &EngineSupports::sinks,
    &EngineSupports::alibi,
    &EngineSupports::chunked_local,
    &EngineSupports::kv_fp8,
    &EngineSupports::kv_ggml_blocks,
    &EngineSupports::kv_affine,
    &EngineSupports::value_from_key,
    &EngineSupports::rope_interleaved,
    &EngineSupports::rope_dims};

// Optional operations. An engine announces what it can do so that generators leave out
// what it cannot (the runner reports an op the engine does not support as an error).
struct EngineCapabilities {
  bool truncate = false;
  bool fork = false;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual EngineCapabilities capabilities() const { return {}; }
  // The invariances it keeps bit for bit (none unless it says so).
  virtual BitwiseClaims bitwise_claims() const { return {}; }
  // How it computes and what it can be given (both must not depend on the layout).
  virtual EngineNumerics numerics() const { return {}; }
  virtual EngineSupports supports() const { return {}; }
  // One batched forward: append every chunk's tokens to its sequence and return one row
  // per new token. outs.size() == chunks.size().
  virtual void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) = 0;
  // Start a new epoch of `seq`: its positions start at 0 again and its old K/V are gone.
  virtual void reset(int seq) = 0;
  // Roll `seq` back to its first `keep` tokens (0 <= keep <= its length), as speculative
  // decoding does: the next token it is fed gets position `keep`, and no row may see the
  // dropped tokens again. Only called when capabilities().truncate.
  virtual void truncate(int seq, int64_t keep);
  // `dst` drops what it held and starts with `src`'s tokens (a shared prefix): the next
  // token fed to `dst` gets position length(src); `src` is unchanged and both may grow
  // independently afterwards. src != dst. Only called when capabilities().fork.
  virtual void fork(int src, int dst);
};

// A reset, truncate or fork fed to an engine as the runner (and the model level, for every
// layer) does: an optional operation the engine does not announce is refused with an
// EngineError, never called. `describe_history_op` names the op for error messages
// ("truncate of seq 0 to 3 tokens").
void apply_history_op(Engine& engine, const Op& op);
std::string describe_history_op(const Op& op);

// The engine's configuration for a scenario: layout, sequences, poison, and the page order
// resolved to a permutation of the pool (identity, reversed or the explicit list).
EngineConfig engine_config(const Scenario& scenario);

using EngineFactory = std::function<std::unique_ptr<Engine>(const EngineConfig&)>;

// Engines that run a whole model and return logits (kvfuzz/model_engine.h).
class ModelEngine;
struct ModelEngineConfig;
using ModelEngineFactory = std::function<std::unique_ptr<ModelEngine>(const ModelEngineConfig&)>;

struct EngineInfo {
  std::string name;
  std::string description;  // one sentence
  bool mutant = false;      // a deliberately wrong engine that the suite must reject
  EngineFactory make;
  // Its engines compute in a process of their own (exec:), so a crash there is the
  // engine's error, never kvfuzz's: kvfuzz check asks it for its declarations without
  // forking a child for the asking (probe_declarations_isolated, kvfuzz/check.h).
  bool out_of_process = false;
  // Set for an engine that runs whole models (model scenarios only; `make` is then empty):
  // the model level gives it vocabulary ids and judges its logits.
  ModelEngineFactory make_model = {};
  // How many of its engines' calls ended at the engine's own time limit, over this process's
  // life (an exec: engine's KVFUZZ_ENGINE_TIMEOUT); empty for engines without one. A case
  // ends at its engine's first hang (CaseJudge, kvfuzz/orchestrate.h): every other property
  // would wait out the same limit again.
  std::function<int64_t()> hangs = {};
};

// Every built-in attention engine, honest ones first, in a fixed order. The groups all,
// mutants and every of an --engine spec, and every loop of the tests over "the engines",
// mean these.
const std::vector<EngineInfo>& engine_registry();
// The built-in whole-model engines (make_model only: model scenarios), honest ones first:
// named on their own (--engine model-cached), never by a group, since a group's engines
// share each case's scenario and an attention scenario says nothing about them.
const std::vector<EngineInfo>& model_engine_registry();
// A name of either registry.
const EngineInfo* find_engine(std::string_view name);
// Every registry name, comma-separated: what an "unknown engine" error offers instead.
std::string engine_names();
// " (did you mean 'flash'?)" when one registry name is within two edits of `name` (a typo),
// "" otherwise: what an "unknown engine" error adds.
std::string did_you_mean(std::string_view name);

// What an engine announces, asked of one made for the smallest layout (one head of one
// dimension, four sequences, four pages). Capabilities must not depend on the layout.
// Throws EngineError when it cannot even be made.
EngineCapabilities probe_capabilities(const EngineInfo& engine);

// Everything an engine declares, asked of one engine made as probe_capabilities does.
struct EngineDeclarations {
  EngineCapabilities capabilities;
  EngineNumerics numerics;
  EngineSupports supports;
  BitwiseClaims bitwise;
  // It runs whole models only (EngineInfo::make_model without make): model scenarios only.
  bool whole_model = false;
};
// A whole-model engine is made as a ModelEngine for the same layout and ModelConfig's
// defaults (vocab 16, width 8, one layer, ffn 16), and asked for its capabilities, numerics
// and supports (it claims nothing bit for bit).
EngineDeclarations probe_declarations(const EngineInfo& engine);

// Why `scenario` says nothing about an engine with these declarations, as a phrase to
// follow the engine's name: "uses truncate, which it does not announce", "lies outside
// its supports: storage dtype f32 (...)", or "is an attention scenario, and the engine runs
// whole models only". Nothing when it can be judged. Replay,
// explain, shrink and the corpus tests skip (or refuse) such a scenario.
std::optional<std::string> unjudgeable(const Scenario& scenario,
                                       const EngineDeclarations& declared);

// Why `scenario` lies outside what `supports` allows ("storage dtype bf16 (supports f16)"),
// or nothing when the engine can be given it.
std::optional<std::string> unsupported_layout(const Scenario& scenario,
                                              const EngineSupports& supports);

// The first optional operation `scenario` uses that `can` lacks ("truncate" or "fork"):
// such a scenario says nothing about that engine, so replays skip it and fuzz targets
// ignore it. Nothing when the engine can run the whole program.
std::optional<std::string> unsupported_operation(const Scenario& scenario, EngineCapabilities can);

}  // namespace kvfuzz
