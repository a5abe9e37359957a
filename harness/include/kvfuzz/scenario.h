// The scenario model: one complete, deterministic test case (see docs/fixture-format.md).
//
// layout + token table + program + physical placement. Fixtures are scenarios written as
// JSON; generators build scenarios directly. Nothing here knows about engines.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/kv_format.h"
#include "kvfuzz/thread_schedule.h"

namespace kvfuzz {

// Which elements RoPE turns together (Layout::rope_style). Pair i < dims / 2 of the turned
// part (RopeShape) turns by pos * theta^(-2i / dims) in both; they differ in where its two
// elements sit within the part:
//   half_split   (x_i, x_{i + dims/2}): GPT-NeoX's rotate_half, Llama in transformers, vLLM's
//                is_neox_style, ggml's GGML_ROPE_TYPE_NEOX;
//   interleaved  (x_{2i}, x_{2i+1}): GPT-J's, ggml's normal mode (GGUF Llama models), vLLM's
//                is_neox_style=False, DeepSeek's MLA RoPE part.
enum class RopeStyle { half_split, interleaved };
// "half_split" or "interleaved", as fixtures spell them.
const char* rope_style_name(RopeStyle style);

// The two elements of one RoPE pair, as indices into the whole head.
struct RopePair {
  size_t first, second;
};

// The elements RoPE turns in a head of head_dim: the last `dims` (all of them unless the
// layout's rope_dims says fewer: MLA's decoupled RoPE part, DeepSeek's qk_rope_head_dim
// after its unrotated qk_nope part), in pairs of `style`. The one place that names a pair's
// elements: every rotation in the project (the references, the generator's score spreads,
// the CPU engines) goes through it.
struct RopeShape {
  size_t head_dim = 0;
  size_t dims = 0;  // even, at most head_dim
  RopeStyle style = RopeStyle::half_split;

  constexpr size_t pairs() const { return dims / 2; }
  // The first element RoPE turns; the ones before it are left as they are.
  constexpr size_t offset() const { return head_dim - dims; }
  constexpr bool turns(size_t d) const { return d >= offset(); }
  // Pair i < pairs(): its two elements in the head.
  constexpr RopePair pair(size_t i) const {
    const size_t at = head_dim - dims;
    return style == RopeStyle::interleaved ? RopePair{at + 2 * i, at + 2 * i + 1}
                                           : RopePair{at + i, at + i + dims / 2};
  }
  // The pair of element d (turns(d)).
  constexpr size_t pair_of(size_t d) const {
    const size_t in = d - (head_dim - dims);
    return style == RopeStyle::interleaved ? in / 2 : in % (dims / 2);
  }
};

struct Layout {
  int q_heads = 1;
  int kv_heads = 1;
  int head_dim = 1;
  int value_dim = 1;
  int page_size = 16;
  DType dtype = DType::f32;
  std::optional<double> rope_theta;              // RoPE with this base when set
  RopeStyle rope_style = RopeStyle::half_split;  // its pairs (only with rope_theta)
  // RoPE turns only the head's last rope_dims elements (only with rope_theta; absent: all):
  // MLA's decoupled RoPE part, whose first elements (the latent, and the value with
  // value_from_key) stay unrotated.
  std::optional<int> rope_dims;
  std::optional<int> window;    // query at p sees keys [p - window + 1, p]
  std::optional<double> scale;  // softmax scale; 1/sqrt(head_dim) when absent
  // The attention features of today's engines (docs/fixture-format.md, "Attention
  // features"). Absent or empty: off. A logit is scale * q.k, then soft-capped, then biased
  // by ALiBi; a sink joins the softmax with its own logit and no value.
  std::optional<double> softcap;  // logit -> softcap * tanh(logit / softcap) (Gemma 2)
  std::vector<double> sinks;      // per q head: a logit in every row's softmax (gpt-oss)
  std::vector<double> alibi;      // per q head: logit += alibi[h] * (key pos - query pos)
  // Llama 4's chunked local attention: the query at p sees keys from floor(p / C) * C on
  // (and the window's cut, when both are set).
  std::optional<int> chunked_local;
  // Quantized KV caches (kvfuzz/kv_format.h; docs/fixture-format.md, "Quantized KV
  // caches"): how the cache stores K and V. Engines are given K and V in `dtype` and store
  // them in these formats; the reference attends over what such a cache reads back.
  KvFormat k_format;
  KvFormat v_format;
  // Multi-head latent attention as MLA kernels see it (DeepSeek V2/V3; FlashMLA, FlashInfer
  // MLA): the value is the key's first value_dim elements (one shared latent row per token
  // and kv head, stored once), not a row of its own. The token table's v is then k's prefix.
  bool value_from_key = false;

  // RoPE off (rope_theta, its pairs and its part).
  void clear_rope() {
    rope_theta.reset();
    rope_style = RopeStyle::half_split;
    rope_dims.reset();
  }
  // What RoPE turns in a q or k head (meaningful with rope_theta).
  RopeShape rope_shape() const {
    const auto hd = static_cast<size_t>(head_dim);
    return {hd, rope_dims ? static_cast<size_t>(*rope_dims) : hd, rope_style};
  }
  int group() const { return q_heads / kv_heads; }
  int kv_head_of(int q_head) const { return q_head / group(); }
  double softmax_scale() const;
  // Whether any attention feature above is on, MLA's value_from_key, RoPE's interleaved
  // pairs and its part included (engines declare each in EngineSupports).
  bool has_features() const;
  // Whether K or V is stored quantized.
  bool quantized_kv() const { return k_format.quantized() || v_format.quantized(); }
  // The sink logits as engines and the reference see them: rounded to a storage dtype of
  // f16 or bf16, as token values are (a model stores its sinks in its dtype); f32 as given.
  std::vector<double> stored_sinks() const;
  double stored_sink(int q_head) const;
  // The first key position the query at `pos` sees: the window's and chunked_local's cut.
  int64_t first_visible(int64_t pos) const;
  bool operator==(const Layout&) const = default;
};

// The standard ALiBi slopes for `heads` q heads (BLOOM's, and ggml's with max_bias 8):
// with n = the largest power of two <= heads, head h < n has 2^(-8 (h + 1) / n), the rest
// 2^(-4 (2 (h - n) + 1) / n). A fixture may say "alibi": "standard" for these.
std::vector<double> standard_alibi_slopes(int heads);

// Token data given value by value: q[head][dim], k[head][dim], v[head][dim].
struct ExplicitToken {
  std::vector<std::vector<double>> q, k, v;
  bool operator==(const ExplicitToken&) const = default;
};

enum class Distribution { small_int, dyadic, uniform, wide };

// Token data generated from a seed with the project's PRNG (bit-identical everywhere).
struct GeneratedTokens {
  uint64_t seed = 0;
  int count = 0;
  Distribution distribution = Distribution::small_int;
  bool zero_scores = false;  // q = k = 0, so every visible key gets equal weight
  // q and k multiplied by 2^qk_log2 (exact: a power of two) after drawing: scores spread by
  // the size of q and k, not only by the scale (generate/score_spreads.h). 0 to 12.
  int qk_log2 = 0;
  bool operator==(const GeneratedTokens&) const = default;
};

using TokenSource = std::variant<std::vector<ExplicitToken>, GeneratedTokens>;

int token_count(const TokenSource& source);

enum class OpKind { append, step, reset, truncate, fork };

struct Chunk {
  int seq = 0;
  std::vector<int> tokens;  // token ids into the token table
  bool operator==(const Chunk&) const = default;
};

// One program op.
//   append:   `seq` and `tokens`
//   step:     `chunks` (one batched forward over several sequences)
//   reset:    `seq` (a new epoch at position 0)
//   truncate: `seq` keeps its first `keep` tokens (a new epoch that continues at `keep`)
//   fork:     `seq` (the destination) starts with the tokens of `src` (a new epoch of `seq`
//             that continues at the length of `src`)
struct Op {
  OpKind kind = OpKind::append;
  int seq = 0;
  std::vector<int> tokens;
  std::vector<Chunk> chunks;
  int src = 0;       // fork only
  int64_t keep = 0;  // truncate only

  // The chunks this op feeds the engine: append is a one-chunk step; reset, truncate and
  // fork feed none.
  std::vector<Chunk> batch() const;
  bool operator==(const Op&) const = default;

  static Op append(int seq, std::vector<int> tokens);
  static Op step(std::vector<Chunk> chunks);
  static Op reset(int seq);
  static Op truncate(int seq, int64_t keep);
  static Op fork(int src, int dst);
};

enum class PageOrder { identity, reversed, explicit_list };
enum class Poison { nan, pos_inf, neg_inf, huge };

std::string_view poison_name(Poison poison);
std::optional<Poison> parse_poison(std::string_view name);

// Physical placement: which physical pages the paged engines hand out, in order, what
// every byte outside the valid prefix holds, and in which order a kernel launcher on the
// CPU runs a block's threads (thread_schedule.h).
struct Placement {
  PageOrder order = PageOrder::identity;
  std::vector<int> pages;         // explicit_list only: a permutation of the pool
  std::optional<int> pool_pages;  // pool size; derived from the program when absent
  Poison poison = Poison::nan;
  ThreadSchedule threads;
  bool operator==(const Placement&) const = default;
};

// A hand-derived expected row: values[q_head][value_dim].
struct ExpectedRow {
  int seq = 0;
  int epoch = 0;
  int64_t pos = 0;
  std::vector<std::vector<double>> values;
  bool operator==(const ExpectedRow&) const = default;
};

// Where a fixture came from. Every field but `source` is optional.
struct Provenance {
  std::string source = "hand";  // hand | check | shrink | fuzz
  std::optional<std::string> engine;
  std::optional<std::string> property;
  std::optional<uint64_t> seed;
  std::optional<std::string> failure;  // first diverging row, as the report printed it
  std::optional<std::string> kvfuzz_version;
  bool operator==(const Provenance&) const = default;
};

// A tiny decoder-only transformer around the attention (kvfuzz/model.h): when a scenario
// has one, its chunks' token ids are vocabulary ids in [0, vocab), each layer's attention
// has the scenario's layout and runs in its own engine instance, and what is compared is
// the logits (and, to locate a failure, every layer's state). Weights come from `seed`.
struct ModelConfig {
  int vocab = 16;  // token ids and logits per row
  int width = 8;   // the residual stream (d_model)
  int layers = 1;  // each: RMSNorm, attention (q_heads x head_dim), RMSNorm, SwiGLU MLP
  int ffn = 16;    // SwiGLU hidden width
  uint64_t seed = 1;
  bool operator==(const ModelConfig&) const = default;
};

struct Scenario {
  std::string name;
  std::string note;
  Layout layout;
  std::optional<ModelConfig> model;  // model level (docs/fixture-format.md, "model")
  TokenSource tokens;
  int sequences = 1;
  std::vector<Op> program;
  Placement placement;
  std::vector<ExpectedRow> expect;
  Provenance provenance;
  bool operator==(const Scenario&) const = default;
};

// The first problem found in a scenario, as a JSON path and what was expected there,
// e.g. {"$.layout.kv_heads", "a divisor of q_heads (4), got 3"}.
struct FieldError {
  std::string path;
  std::string message;
};

// Checks every cross-field rule (shapes, divisibility, token ids, sequences, limits).
// The parser calls it after reading; generators call it on what they build.
std::optional<FieldError> validate(const Scenario& scenario);

// One chunk of the program where it lands: the op and chunk that feed it, the sequence's
// epoch at that moment (each reset starts a new one) and the position of its first token.
struct PlacedChunk {
  int op = 0;
  int chunk = 0;  // index in the op's batch (0 for an append)
  int seq = 0;
  int epoch = 0;
  int64_t start = 0;
  const std::vector<int>* tokens = nullptr;
};

// A reset, truncate or fork as the program walker sees it: the sequence whose new epoch
// it starts, how many tokens the ended epoch held, and how many the new one inherits
// (0 after a reset, `keep` after a truncate, the source's length after a fork).
struct EpochStart {
  int op = 0;
  OpKind kind = OpKind::reset;
  int seq = 0;
  int epoch = 0;  // the new epoch
  int64_t ended_length = 0;
  int64_t inherited = 0;
};

// Walks the program in order and calls `visit` for every chunk it feeds the engine (and
// `visit_epoch`, if given, for every reset, truncate and fork). The one place that knows
// how ops move epochs and positions. Each reset, truncate and fork starts a new epoch of
// the sequence it changes, so a (sequence, epoch, position) key names one row for good.
void for_each_chunk(const Scenario& scenario, const std::function<void(const PlacedChunk&)>& visit,
                    const std::function<void(const EpochStart&)>& visit_epoch = {});

// The token ids one (sequence, epoch) held, in order: position p holds tokens[p]. The first
// `first_row` of them were inherited (kept by a truncate, shared by a fork): they are keys
// for every row but have no rows of their own in this epoch.
struct LogicalStream {
  int seq = 0;
  int epoch = 0;
  std::vector<int> tokens;
  int64_t first_row = 0;
};

// Every (sequence, epoch) stream the program builds, in order of first appearance.
// Epochs with no tokens are left out.
std::vector<LogicalStream> logical_streams(const Scenario& scenario);

// Pages the paged engines need: the pool size when the placement does not fix it.
int required_pool_pages(const Scenario& scenario);
// Tokens the program feeds the engine (every chunk of every op): a scenario's size.
int program_tokens(const Scenario& scenario);
// Longest (sequence, epoch) token stream of the program.
int max_epoch_length(const Scenario& scenario);

}  // namespace kvfuzz
