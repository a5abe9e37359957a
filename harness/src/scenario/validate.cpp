// Cross-field validation of a scenario (see scenario.h and docs/fixture-format.md).
//
// The fixture parser checks types and shapes of the JSON and then calls validate();
// generators call validate() on what they build. So every rule that makes a scenario
// safe to run lives here, including the per-field limits the parser also checks: a
// scenario that passes validate() can be materialised and run without unbounded work.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/limits.h"
#include "kvfuzz/scenario.h"
#include "support/text.h"

namespace kvfuzz {

namespace {

// Explicit token values beyond this overflow f32 accumulation (|q.k| and sums of v).
constexpr double kMaxTokenMagnitude = 1e16;

struct Invalid {
  FieldError error;
};

// Reports the first problem: `message` is what was expected and what was found, without
// the leading "expected" (the parser adds it: "PATH: expected MESSAGE").
[[noreturn]] void reject(std::string path, std::string message) {
  throw Invalid{FieldError{std::move(path), std::move(message)}};
}

std::string num(double x) {
  std::array<char, 64> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), x);
  return ec == std::errc() ? std::string(buffer.data(), end) : std::string("?");
}

std::string str(int64_t x) {
  return std::to_string(x);
}

std::string count_text(int64_t n, std::string_view singular, std::string_view plural) {
  return str(n) + " " + std::string(n == 1 ? singular : plural);
}

std::string at(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

void check_text(const std::string& path, const std::string& text, size_t min_bytes,
                std::string_view what) {
  const auto max_bytes = static_cast<size_t>(limits::kMaxTextLength);
  if (text.size() < min_bytes || text.size() > max_bytes) {
    reject(path, std::string(what) + " of " + str(static_cast<int64_t>(min_bytes)) + " to " +
                     str(limits::kMaxTextLength) + " bytes, got " +
                     count_text(static_cast<int64_t>(text.size()), "byte", "bytes"));
  }
  if (const auto offset = first_invalid_utf8(text)) {
    reject(path,
           "valid UTF-8 text, got an invalid byte at offset " + str(static_cast<int64_t>(*offset)));
  }
}

void check_range(const std::string& path, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    reject(path, "an integer in [" + str(lo) + ", " + str(hi) + "], got " + str(value));
  }
}

// The dense weights of one layer that every token multiplies: q, k, v and output
// projections and the SwiGLU MLP (the norms are negligible).
int64_t layer_multiplies(const ModelConfig& m, const Layout& l) {
  const int64_t width = m.width;
  return width * (int64_t{l.q_heads} * l.head_dim + int64_t{l.kv_heads} * l.head_dim +
                  int64_t{l.kv_heads} * l.value_dim) +
         int64_t{l.q_heads} * l.value_dim * width + 3 * width * m.ffn;
}

// Every weight of the model (limits::kMaxModelWeights; model/transformer.h's shapes).
int64_t model_weights(const ModelConfig& m, const Layout& l) {
  const int64_t width = m.width;
  return 2 * int64_t{m.vocab} * width + width +
         int64_t{m.layers} * (layer_multiplies(m, l) + 2 * width);
}

// Multiply-adds per row (limits::kMaxModelWork): every layer and the LM head.
int64_t model_work_per_token(const ModelConfig& m, const Layout& l) {
  return int64_t{m.layers} * layer_multiplies(m, l) + int64_t{m.width} * m.vocab;
}

// Values both evaluations keep per row (limits::kMaxModelRowValues): each layer's
// attention output and hidden state, and the logits.
int64_t model_values_per_token(const ModelConfig& m, const Layout& l) {
  return int64_t{m.layers} * (int64_t{l.q_heads} * l.value_dim + m.width) + m.vocab;
}

class Validator {
 public:
  explicit Validator(const Scenario& scenario)
      : s_(scenario),
        layout_(scenario.layout),
        model_(scenario.model ? &*scenario.model : nullptr) {}

  void run() {
    check_text("$.name", s_.name, 1, "a name");
    check_text("$.note", s_.note, 0, "a note");
    check_layout();
    check_model();
    check_tokens();
    check_range("$.sequences", s_.sequences, 1, limits::kMaxSequences);
    check_program();
    if (model_) check_model_streams();
    check_placement();
    judge_expect();
    check_provenance();
  }

 private:
  const Scenario& s_;
  const Layout& layout_;
  const ModelConfig* model_ = nullptr;  // model level when set
  int tokens_ = 0;
  // epochs_[seq][epoch] = the length of that (sequence, epoch), inherited tokens included;
  // inherited_[seq][epoch] = the tokens it inherited (truncate, fork), which have no rows.
  std::vector<std::vector<int64_t>> epochs_;
  std::vector<std::vector<int64_t>> inherited_;

  void start_epoch(int seq, int64_t inherited) {
    epochs_[static_cast<size_t>(seq)].push_back(inherited);
    inherited_[static_cast<size_t>(seq)].push_back(inherited);
  }

  void check_layout() {
    check_range("$.layout.q_heads", layout_.q_heads, 1, limits::kMaxQHeads);
    check_range("$.layout.kv_heads", layout_.kv_heads, 1, limits::kMaxKvHeads);
    check_range("$.layout.head_dim", layout_.head_dim, 1, limits::kMaxHeadDim);
    check_range("$.layout.value_dim", layout_.value_dim, 1, limits::kMaxValueDim);
    check_range("$.layout.page_size", layout_.page_size, 1, limits::kMaxPageSize);
    if (dtype_name(layout_.dtype) == "?") {
      reject("$.layout.dtype", "one of \"f32\", \"f16\", \"bf16\", got dtype #" +
                                   str(static_cast<int>(layout_.dtype)));
    }
    if (layout_.q_heads % layout_.kv_heads != 0) {
      reject("$.layout.kv_heads",
             "a divisor of q_heads (" + str(layout_.q_heads) + "), got " + str(layout_.kv_heads));
    }
    if (layout_.rope_theta) {
      const double theta = *layout_.rope_theta;
      if (!std::isfinite(theta) || !(theta > 1) || theta > limits::kMaxRopeTheta) {
        reject("$.layout.rope_theta",
               "a finite number in (1, " + num(limits::kMaxRopeTheta) + "], got " + num(theta));
      }
      if (layout_.head_dim % 2 != 0) {
        reject("$.layout.head_dim",
               "an even head_dim when rope_theta is set (RoPE rotates pairs of elements), got " +
                   str(layout_.head_dim));
      }
    }
    if (layout_.rope_style != RopeStyle::half_split) {
      if (layout_.rope_style != RopeStyle::interleaved) {
        reject("$.layout.rope_style", "\"half_split\" or \"interleaved\", got style #" +
                                          str(static_cast<int>(layout_.rope_style)));
      }
      if (!layout_.rope_theta) {
        reject("$.layout.rope_style",
               "no rope_style without rope_theta (it says which pairs RoPE turns), got \"" +
                   std::string(rope_style_name(layout_.rope_style)) + "\"");
      }
      if (model_) {
        reject("$.layout.rope_style",
               "no interleaved RoPE in a model scenario: the model level does not model it yet");
      }
    }
    check_rope_dims();
    if (layout_.window) {
      check_range("$.layout.window", *layout_.window, 1, limits::kMaxEpochTokens);
    }
    if (layout_.scale) {
      const double scale = *layout_.scale;
      if (!std::isfinite(scale) || !(scale > 0)) {
        reject("$.layout.scale", "a finite number > 0, got " + num(scale));
      }
    }
    check_features();
    check_kv_format("$.layout.k_format", layout_.k_format, layout_.head_dim, "head_dim");
    check_kv_format("$.layout.v_format", layout_.v_format, layout_.value_dim, "value_dim");
    // The model level models ggml's blocks and the affine groups (model_tolerance.cpp: each
    // element's largest error in its block or group, from the block's own values, as one more
    // rounding noise); fp8's fixed scales may saturate, and are not modelled there yet.
    if (model_) {
      for (const auto& [path, format] : {std::pair{"$.layout.k_format", &layout_.k_format},
                                         std::pair{"$.layout.v_format", &layout_.v_format}}) {
        if (is_fp8(format->quant)) {
          reject(path,
                 "none, one of ggml's block formats (q8_0, q4_0, q4_1, q5_0, q5_1) or an affine "
                 "one (affine2, affine4, affine8) in a model scenario (the model level models "
                 "no fp8 KV cache yet), got " +
                     std::string(kv_quant_name(format->quant)));
        }
      }
      // A score spread's scale (2^8 and more times 1/sqrt(head_dim)) makes softmax pick one
      // key, and which one a block's error decides: an honest engine's logits then jump
      // by O(1), which the model tolerance's noise (smooth, first order) does not cover.
      const double most_scale =
          limits::kMaxModelKvBlocksScale / std::sqrt(static_cast<double>(layout_.head_dim));
      if (layout_.quantized_kv() && layout_.scale && *layout_.scale > most_scale) {
        reject("$.layout.scale", "at most " + num(most_scale) +
                                     " (8 / sqrt(head_dim)) in a model scenario with a "
                                     "quantized KV cache (softmax then weighs keys smoothly: "
                                     "model_tolerance.cpp), got " +
                                     num(*layout_.scale));
      }
    }
    check_value_from_key();
  }

  // RoPE on the head's last rope_dims elements: an even number of them, fewer than head_dim
  // (all of them is the field left out: one spelling per scenario).
  void check_rope_dims() {
    if (!layout_.rope_dims) return;
    const int dims = *layout_.rope_dims;
    if (!layout_.rope_theta) {
      reject(
          "$.layout.rope_dims",
          "no rope_dims without rope_theta (it says which elements RoPE turns), got " + str(dims));
    }
    if (dims < 2 || dims % 2 != 0 || dims >= layout_.head_dim) {
      reject("$.layout.rope_dims",
             "an even number from 2 to head_dim - 1 (" + str(layout_.head_dim - 1) +
                 "; RoPE over the whole head leaves rope_dims out), got " + str(dims));
    }
    if (model_) {
      reject("$.layout.rope_dims",
             "no rope_dims in a model scenario: the model level does not model it yet");
    }
  }

  // MLA's shared latent row: the value is the key's first value_dim elements, in K's format
  // (no V format of its own), and unrotated: with RoPE only the key's
  // last rope_dims elements turn (the decoupled RoPE part), and the value lies before them.
  void check_value_from_key() {
    if (!layout_.value_from_key) return;
    if (layout_.value_dim > layout_.head_dim) {
      reject("$.layout.value_dim", "at most head_dim (" + str(layout_.head_dim) +
                                       ") with value_from_key (the value is the key's first "
                                       "value_dim elements), got " +
                                       str(layout_.value_dim));
    }
    if (layout_.rope_theta && !layout_.rope_dims) {
      reject("$.layout.rope_dims",
             "rope_dims with value_from_key and rope_theta (MLA's RoPE turns only the key's "
             "last rope_dims elements; the value is the unrotated latent before them), got none");
    }
    if (layout_.rope_theta && layout_.rope_dims) {
      const int turned = *layout_.rope_dims;
      if (layout_.value_dim > layout_.head_dim - turned) {
        reject("$.layout.value_dim",
               "at most head_dim - rope_dims (" + str(layout_.head_dim - turned) +
                   ") with value_from_key and rope_theta (the value is the key's unrotated "
                   "first elements; RoPE turns its last rope_dims), got " +
                   str(layout_.value_dim));
      }
    }
    // A latent cache in fp8 (vLLM's and FlashMLA's kv_cache_dtype=fp8), ggml's blocks
    // (llama.cpp's DeepSeek with -ctk q8_0) or affine groups: the value is the key's stored
    // latent, read back through K's format and scale. fp8 is elementwise; a block or group
    // shares its scale among its elements, so the value must be whole blocks of the key row
    // (as llama.cpp's V view of the K cache is): then, with RoPE, no block of the value
    // holds a rotated element, and the stored latent is known exactly.
    if (layout_.v_format.quantized()) {
      reject("$.layout.v_format",
             "none with value_from_key (the value is read from the key's cache, stored as "
             "k_format says), got " +
                 std::string(kv_quant_name(layout_.v_format.quant)));
    }
    const int multiple = row_multiple(layout_.k_format);
    if (layout_.value_dim % multiple != 0) {
      reject("$.layout.value_dim",
             "a multiple of " + str(multiple) + " with value_from_key and k_format " +
                 std::string(kv_quant_name(layout_.k_format.quant)) +
                 " (the value is whole blocks of the key's stored row), got " +
                 str(layout_.value_dim));
    }
  }

  // A quantized KV format (docs/fixture-format.md, "Quantized KV caches"): fp8 scales
  // positive and exact in f32, one or one per kv head; ggml blocks whole rows, no scale;
  // affine groups one of MLX's sizes, whole rows, no scale.
  void check_kv_format(const std::string& path, const KvFormat& format, int row,
                       const char* row_name) {
    if (!format.quantized()) return;
    const std::string name(kv_quant_name(format.quant));
    if (!has_group(format.quant) && format.group != 0) {
      reject(path + ".group",
             "no group for " + name + " (only the affine and per-channel formats have one)");
    }
    if (is_channel(format.quant)) {
      if (path != "$.layout.k_format") {
        reject(path, "no per-channel format for values (" + name +
                         " quantizes keys by channel; values quantized per token are an affine "
                         "format)");
      }
      if (!format.scale.empty()) {
        reject(path + ".scale", "no scale for " + name + " (a group stores its own per channel)");
      }
      if (std::find(std::begin(kChannelGroups), std::end(kChannelGroups), format.group) ==
          std::end(kChannelGroups)) {
        reject(path + ".group", "16, 32, 64 or 128 positions, got " + str(format.group));
      }
      if (model_) {
        reject(path,
               "no per-channel format in a model scenario (the model level does not model "
               "it yet)");
      }
      if (layout_.value_from_key) {
        reject(path,
               "no per-channel format with value_from_key (a value is read from one key's "
               "row; a per-channel group is many keys')");
      }
      return;
    }
    if (is_affine(format.quant)) {
      if (!format.scale.empty()) {
        reject(path + ".scale", "no scale for " + name + " (an affine group stores its own)");
      }
      if (std::find(std::begin(kAffineGroups), std::end(kAffineGroups), format.group) ==
          std::end(kAffineGroups)) {
        reject(path + ".group", "32, 64 or 128 (MLX's group sizes), got " + str(format.group));
      }
      if (row % format.group != 0) {
        reject(path, std::string("a ") + row_name + " that is a multiple of the group (" +
                         str(format.group) + ") for " + name + ", got " + row_name + " " +
                         str(row));
      }
      return;
    }
    if (is_ggml_block(format.quant)) {
      if (!format.scale.empty()) {
        reject(path + ".scale", std::string("no scale for ") +
                                    std::string(kv_quant_name(format.quant)) +
                                    " (a ggml block stores its own)");
      }
      if (row % kGgmlBlock != 0) {
        reject(path, std::string("a ") + row_name + " that is a multiple of " + str(kGgmlBlock) +
                         " for " + std::string(kv_quant_name(format.quant)) +
                         " (ggml quantizes blocks of 32), got " + row_name + " " + str(row));
      }
      return;
    }
    const size_t n = format.scale.size();
    if (n > 1 && n != static_cast<size_t>(layout_.kv_heads)) {
      reject(path + ".scale", "one number, or one per kv head (" + str(layout_.kv_heads) +
                                  "), got " + str(static_cast<int64_t>(n)));
    }
    for (size_t g = 0; g < n; ++g) {
      const double s = format.scale[g];
      const std::string at =
          n == 1 ? path + ".scale" : path + ".scale[" + str(static_cast<int64_t>(g)) + "]";
      if (!(s >= limits::kMinKvScale && s <= limits::kMaxKvScale) ||
          static_cast<double>(static_cast<float>(s)) != s) {
        reject(at, "a number in [2^-32, 2^32] that f32 holds exactly, got " + num(s));
      }
    }
  }

  // The attention features (docs/fixture-format.md, "Attention features").
  void check_features() {
    if (layout_.softcap) {
      const double cap = *layout_.softcap;
      if (!std::isfinite(cap) || !(cap > 0) || cap > limits::kMaxSoftcap) {
        reject("$.layout.softcap",
               "a finite number in (0, " + num(limits::kMaxSoftcap) + "], got " + num(cap));
      }
    }
    const auto per_head = [&](const std::string& path, const std::vector<double>& values, double lo,
                              double hi) {
      if (values.empty()) return;
      if (values.size() != static_cast<size_t>(layout_.q_heads)) {
        reject(path, "one number per q head (" + str(layout_.q_heads) + "), got " +
                         str(static_cast<int64_t>(values.size())));
      }
      for (size_t h = 0; h < values.size(); ++h) {
        if (!std::isfinite(values[h]) || values[h] < lo || values[h] > hi) {
          reject(path + "[" + str(static_cast<int64_t>(h)) + "]",
                 "a finite number in [" + num(lo) + ", " + num(hi) + "], got " + num(values[h]));
        }
      }
    };
    per_head("$.layout.sinks", layout_.sinks, -limits::kMaxSinkLogit, limits::kMaxSinkLogit);
    per_head("$.layout.alibi", layout_.alibi, 0, limits::kMaxAlibiSlope);
    if (layout_.chunked_local) {
      check_range("$.layout.chunked_local", *layout_.chunked_local, 1, limits::kMaxEpochTokens);
    }
    if (model_ && layout_.has_features()) {
      reject("$.layout",
             "no attention features (softcap, sinks, alibi, chunked_local, value_from_key) in a "
             "model scenario: "
             "the model level does not model them yet");
    }
  }

  // Model level: the fields within their limits and the whole model's weights bounded.
  // (The program's rows and work are bounded chunk by chunk, check_chunk.)
  void check_model() {
    if (!model_) return;
    const ModelConfig& m = *model_;
    check_range("$.model.vocab", m.vocab, 1, limits::kMaxModelVocab);
    check_range("$.model.width", m.width, 1, limits::kMaxModelWidth);
    check_range("$.model.layers", m.layers, 1, limits::kMaxModelLayers);
    check_range("$.model.ffn", m.ffn, 1, limits::kMaxModelFfn);
    const int64_t weights = model_weights(m, layout_);
    if (weights > limits::kMaxModelWeights) {
      reject("$.model", "a model of at most " + str(limits::kMaxModelWeights) +
                            " weights (embedding, layers and LM head, with the layout's "
                            "attention shapes), got " +
                            str(weights));
    }
  }

  void check_table_floats(const std::string& path, int64_t count) {
    const int64_t per_token = int64_t{layout_.q_heads} * layout_.head_dim +
                              int64_t{layout_.kv_heads} * layout_.head_dim +
                              int64_t{layout_.kv_heads} * layout_.value_dim;
    if (count * per_token > limits::kMaxTableFloats) {
      reject(path, "at most " + str(limits::kMaxTableFloats) + " floats in the token table, got " +
                       str(count * per_token) + " (" + str(count) + " tokens x " + str(per_token) +
                       " floats each)");
    }
  }

  void check_heads(const std::string& path, const std::vector<std::vector<double>>& heads,
                   int count, std::string_view heads_name, int dim, std::string_view dim_name) {
    if (heads.size() != static_cast<size_t>(count)) {
      reject(path, count_text(count, "head", "heads") + " (" + std::string(heads_name) + "), got " +
                       str(static_cast<int64_t>(heads.size())));
    }
    for (size_t h = 0; h < heads.size(); ++h) {
      const auto& row = heads[h];
      if (row.size() != static_cast<size_t>(dim)) {
        reject(at(path, h), count_text(dim, "number", "numbers") + " (" + std::string(dim_name) +
                                "), got " + str(static_cast<int64_t>(row.size())));
      }
      for (size_t d = 0; d < row.size(); ++d) {
        const double x = row[d];
        const bool in_range = std::isfinite(x) && std::fabs(x) <= kMaxTokenMagnitude;
        // The value is stored as float rounded to the dtype: 70000 is Inf in f16.
        if (in_range && std::isfinite(round_to_dtype(static_cast<float>(x), layout_.dtype))) {
          continue;
        }
        const double largest = max_finite(layout_.dtype);
        if (largest < kMaxTokenMagnitude) {
          reject(at(at(path, h), d), "a value that is finite in " +
                                         std::string(dtype_name(layout_.dtype)) +
                                         " (|x| <= " + num(largest) + "), got " + num(x));
        }
        reject(at(at(path, h), d), "a finite number with |x| <= 1e16, got " + num(x));
      }
    }
  }

  // Model level: no token table, token ids are vocabulary ids. The scenario's source is the
  // canonical GeneratedTokens{seed 0, count vocab, small-int}, the one the parser sets, so
  // a scenario built in code cannot disagree with its fixture.
  void check_model_tokens() {
    const int vocab = model_->vocab;
    const auto* generated = std::get_if<GeneratedTokens>(&s_.tokens);
    const GeneratedTokens canonical{0, vocab, Distribution::small_int, false};
    if (generated == nullptr || *generated != canonical) {
      std::string got = "explicit tokens";
      if (generated != nullptr) {
        const char* names[] = {"small-int", "dyadic", "uniform", "wide"};
        const auto d = static_cast<size_t>(generated->distribution);
        got = "generated tokens {seed " + std::to_string(generated->seed) + ", count " +
              str(generated->count) + ", " + (d < 4 ? names[d] : "?") +
              (generated->zero_scores ? ", zero_scores" : "") +
              (generated->qk_log2 != 0 ? ", qk_log2 " + str(generated->qk_log2) : "") + "}";
      }
      reject("$.tokens",
             "no token table in a model scenario (token ids are vocabulary ids; the scenario "
             "holds generated tokens {seed 0, count " +
                 str(vocab) + " (model.vocab), small-int}), got " + got);
    }
    // The table is not used at model level, but it stays within the table's limits in case
    // anything materialises it.
    check_table_floats("$.model.vocab", vocab);
    tokens_ = vocab;
  }

  void check_tokens() {
    if (model_) {
      check_model_tokens();
      return;
    }
    if (const auto* list = std::get_if<std::vector<ExplicitToken>>(&s_.tokens)) {
      const std::string path = "$.tokens.explicit";
      const auto count = static_cast<int64_t>(list->size());
      if (count < 1 || count > limits::kMaxTableTokens) {
        reject(path, "1 to " + str(limits::kMaxTableTokens) + " tokens, got " + str(count));
      }
      check_table_floats(path, count);
      for (size_t t = 0; t < list->size(); ++t) {
        const ExplicitToken& token = (*list)[t];
        const std::string base = at(path, t);
        check_heads(base + ".q", token.q, layout_.q_heads, "q_heads", layout_.head_dim, "head_dim");
        check_heads(base + ".k", token.k, layout_.kv_heads, "kv_heads", layout_.head_dim,
                    "head_dim");
        if (!layout_.value_from_key) {
          check_heads(base + ".v", token.v, layout_.kv_heads, "kv_heads", layout_.value_dim,
                      "value_dim");
        } else if (!token.v.empty()) {
          reject(base + ".v",
                 "no \"v\" with value_from_key (the value is the key's first value_dim "
                 "elements)");
        }
      }
      tokens_ = static_cast<int>(count);
    } else {
      const auto& generated = std::get<GeneratedTokens>(s_.tokens);
      check_range("$.tokens.generated.count", generated.count, 1, limits::kMaxTableTokens);
      check_range("$.tokens.generated.qk_log2", generated.qk_log2, 0, limits::kMaxQkLog2);
      switch (generated.distribution) {
        case Distribution::small_int:
        case Distribution::dyadic:
        case Distribution::uniform:
        case Distribution::wide:
          break;
        default:
          reject("$.tokens.generated.distribution",
                 "one of \"small-int\", \"dyadic\", \"uniform\", \"wide\", got distribution #" +
                     str(static_cast<int>(generated.distribution)));
      }
      check_table_floats("$.tokens.generated.count", generated.count);
      tokens_ = generated.count;
    }
  }

  void check_seq(const std::string& path, int seq) {
    if (seq < 0 || seq >= s_.sequences) {
      reject(path, "a sequence in [0, " + str(s_.sequences) + ") (the fixture declares " +
                       count_text(s_.sequences, "sequence", "sequences") + "), got " + str(seq));
    }
  }

  void check_chunk(const std::string& path, const std::string& tokens_path, int seq,
                   const std::vector<int>& tokens, int64_t& total) {
    check_seq(path + ".seq", seq);
    const auto n = static_cast<int64_t>(tokens.size());
    if (n < 1 || n > limits::kMaxChunkTokens) {
      reject(tokens_path, "1 to " + str(limits::kMaxChunkTokens) + " token ids, got " + str(n));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (model_ && (tokens[i] < 0 || tokens[i] >= tokens_)) {
        reject(at(tokens_path, i), "a vocabulary id in [0, " + str(tokens_) +
                                       ") (the model's vocab is " + str(tokens_) + "), got " +
                                       str(tokens[i]));
      }
      if (tokens[i] < 0 || tokens[i] >= tokens_) {
        reject(at(tokens_path, i), "a token id in [0, " + str(tokens_) + ") (the token table has " +
                                       count_text(tokens_, "token", "tokens") + "), got " +
                                       str(tokens[i]));
      }
    }
    int64_t& epoch = epochs_[static_cast<size_t>(seq)].back();
    epoch += n;
    if (epoch > limits::kMaxEpochTokens) {
      reject(tokens_path,
             "at most " + str(limits::kMaxEpochTokens) + " tokens in sequence " + str(seq) +
                 " epoch " +
                 str(static_cast<int64_t>(epochs_[static_cast<size_t>(seq)].size()) - 1) +
                 ", got " + str(epoch) + " by the end of this chunk");
    }
    total += n;
    if (total > limits::kMaxProgramTokens) {
      reject(tokens_path, "at most " + str(limits::kMaxProgramTokens) +
                              " tokens in the whole program, got " + str(total) +
                              " by the end of this chunk");
    }
    const int64_t per_token = int64_t{layout_.q_heads} * layout_.value_dim;
    if (total * per_token > limits::kMaxRowValues) {
      reject(tokens_path, "at most " + str(limits::kMaxRowValues) +
                              " row values in the whole program (tokens x q_heads x value_dim), "
                              "got " +
                              str(total * per_token) + " (" + str(total) + " tokens x " +
                              str(per_token) + " values each) by the end of this chunk");
    }
    if (model_) check_model_chunk(tokens_path, total);
  }

  // Model level: what the evaluations cost beyond the rows. The reference recomputes every
  // (sequence, epoch) stream from position 0, inherited tokens included, with attention
  // over min(position + 1, window) keys per layer and head; the cached forward holds one
  // op's q/k/v at once, the reference one stream's. Both are capped, so a program of
  // short appends after long inherited prefixes cannot make a check run unbounded.
  void check_model_streams() {
    const int64_t act = int64_t{layout_.q_heads} * layout_.head_dim +
                        int64_t{layout_.kv_heads} * (layout_.head_dim + layout_.value_dim);
    const int64_t per_key =
        int64_t{model_->layers} * layout_.q_heads * (int64_t{layout_.head_dim} + layout_.value_dim);
    const int64_t work = model_work_per_token(*model_, layout_);
    const int64_t window = layout_.window ? int64_t{*layout_.window} : limits::kMaxEpochTokens;
    double total = 0;  // double: the sum is compared with a limit, never used as a size
    for (size_t seq = 0; seq < epochs_.size(); ++seq) {
      for (size_t e = 0; e < epochs_[seq].size(); ++e) {
        const int64_t n = epochs_[seq][e];
        if (n * act > limits::kMaxModelActivations) {
          reject("$.program", "at most " + str(limits::kMaxModelActivations) +
                                  " q/k/v values in one model stream, got " + str(n * act) +
                                  " (sequence " + str(static_cast<int64_t>(seq)) + " epoch " +
                                  str(static_cast<int64_t>(e)) + ": " + str(n) + " tokens x " +
                                  str(act) + ")");
        }
        const int64_t seen = std::min(n, window);
        total += static_cast<double>(n) * static_cast<double>(work) +
                 static_cast<double>(n) * static_cast<double>(seen) * static_cast<double>(per_key);
      }
    }
    if (total > static_cast<double>(limits::kMaxModelWork)) {
      reject("$.program", "at most " + str(limits::kMaxModelWork) +
                              " multiply-adds for the model's full-prefix reference (every "
                              "stream from position 0, inherited tokens included, attention "
                              "too), got about " +
                              str(static_cast<int64_t>(total)));
    }
    for (size_t o = 0; o < s_.program.size(); ++o) {
      int64_t tokens = static_cast<int64_t>(s_.program[o].tokens.size());
      for (const Chunk& c : s_.program[o].chunks) tokens += static_cast<int64_t>(c.tokens.size());
      if (tokens * act > limits::kMaxModelActivations) {
        reject("$.program[" + str(static_cast<int64_t>(o)) + "]",
               "at most " + str(limits::kMaxModelActivations) +
                   " q/k/v values in one model step, got " + str(tokens * act) + " (" +
                   str(tokens) + " tokens x " + str(act) + ")");
      }
    }
  }

  // Model level: what the program's rows keep and cost, by the end of a chunk.
  void check_model_chunk(const std::string& tokens_path, int64_t total) {
    const int64_t values = model_values_per_token(*model_, layout_);
    if (total * values > limits::kMaxModelRowValues) {
      reject(tokens_path,
             "at most " + str(limits::kMaxModelRowValues) +
                 " model row values in the whole program (tokens x (layers x (q_heads x "
                 "value_dim + width) + vocab)), got " +
                 str(total * values) + " (" + str(total) + " tokens x " + str(values) +
                 " values each) by the end of this chunk");
    }
    const int64_t work = model_work_per_token(*model_, layout_);
    if (total * work > limits::kMaxModelWork) {
      reject(tokens_path, "at most " + str(limits::kMaxModelWork) +
                              " model multiply-adds in the whole program, got " +
                              str(total * work) + " (" + str(total) + " tokens x " + str(work) +
                              " each) by the end of this chunk");
    }
  }

  // Reset, truncate and fork feed no tokens; the fields of the other kinds stay empty so
  // that every valid scenario survives write-then-parse.
  void check_no_payload(const std::string& path, const Op& op, const std::string& what) {
    if (!op.tokens.empty() || !op.chunks.empty()) {
      reject(path, what + " to carry no tokens and no chunks, got " +
                       count_text(static_cast<int64_t>(op.tokens.size()), "token", "tokens") +
                       " and " +
                       count_text(static_cast<int64_t>(op.chunks.size()), "chunk", "chunks"));
    }
    check_no_src_or_keep(path, op, what);
  }

  void check_no_src_or_keep(const std::string& path, const Op& op, const std::string& what) {
    if (op.kind != OpKind::fork && op.src != 0) {
      reject(path, what + " to carry no src, got " + str(op.src));
    }
    if (op.kind != OpKind::truncate && op.keep != 0) {
      reject(path, what + " to carry no keep, got " + str(op.keep));
    }
  }

  void check_program() {
    const auto ops = static_cast<int64_t>(s_.program.size());
    if (ops > limits::kMaxOps) {
      reject("$.program", "at most " + str(limits::kMaxOps) + " ops, got " + str(ops));
    }
    epochs_.assign(static_cast<size_t>(s_.sequences), std::vector<int64_t>{0});
    inherited_.assign(static_cast<size_t>(s_.sequences), std::vector<int64_t>{0});
    int64_t total = 0;
    for (size_t i = 0; i < s_.program.size(); ++i) {
      const Op& op = s_.program[i];
      const std::string path = at("$.program", i);
      switch (op.kind) {
        case OpKind::append:
          if (!op.chunks.empty()) {
            reject(path + ".chunks",
                   "no chunks in an append op, got " + str(static_cast<int64_t>(op.chunks.size())));
          }
          check_no_src_or_keep(path, op, "an append op");
          check_chunk(path, path + ".tokens", op.seq, op.tokens, total);
          break;
        case OpKind::step: {
          check_no_src_or_keep(path, op, "a step op");
          if (op.seq != 0 || !op.tokens.empty()) {
            reject(path, "a step op to carry its sequences and tokens in chunks only, got seq " +
                             str(op.seq) + " and " +
                             count_text(static_cast<int64_t>(op.tokens.size()), "token", "tokens"));
          }
          if (op.chunks.empty()) reject(path + ".chunks", "at least 1 chunk, got 0");
          std::vector<bool> seen(static_cast<size_t>(s_.sequences), false);
          for (size_t c = 0; c < op.chunks.size(); ++c) {
            const Chunk& chunk = op.chunks[c];
            const std::string chunk_path = at(path + ".chunks", c);
            check_seq(chunk_path + ".seq", chunk.seq);
            if (seen[static_cast<size_t>(chunk.seq)]) {
              reject(chunk_path + ".seq",
                     "each sequence at most once per step, got " + str(chunk.seq) + " again");
            }
            seen[static_cast<size_t>(chunk.seq)] = true;
            check_chunk(chunk_path, chunk_path + ".tokens", chunk.seq, chunk.tokens, total);
          }
          break;
        }
        case OpKind::reset:
          check_no_payload(path, op, "a reset op");
          check_seq(path + ".seq", op.seq);
          start_epoch(op.seq, 0);
          break;
        case OpKind::truncate: {
          check_no_payload(path, op, "a truncate op");
          check_seq(path + ".seq", op.seq);
          const int64_t length = epochs_[static_cast<size_t>(op.seq)].back();
          if (op.keep < 0 || op.keep > length) {
            reject(path + ".keep", "a number of tokens in [0, " + str(length) + "] (sequence " +
                                       str(op.seq) + " holds " + str(length) + "), got " +
                                       str(op.keep));
          }
          // A per-channel key group the cache holds whole is quantized: keeping part of it
          // would need its keys as they were (kv_format.h).
          const int group = is_channel(layout_.k_format.quant) ? layout_.k_format.group : 0;
          if (group > 0 && op.keep % group != 0 && (op.keep / group + 1) * group <= length) {
            reject(path + ".keep", "a multiple of k_format's group (" + str(group) +
                                       ") or a keep inside the "
                                       "last, unfinished group (sequence " +
                                       str(op.seq) + " holds " + str(length) +
                                       ", whose groups up to " + str(length / group * group) +
                                       " are quantized by channel), got " + str(op.keep));
          }
          start_epoch(op.seq, op.keep);
          break;
        }
        case OpKind::fork: {
          check_no_payload(path, op, "a fork op");
          check_seq(path + ".src", op.src);
          check_seq(path + ".dst", op.seq);
          if (op.src == op.seq) {
            reject(path + ".dst",
                   "a sequence other than src (" + str(op.src) + "), got " + str(op.seq));
          }
          start_epoch(op.seq, epochs_[static_cast<size_t>(op.src)].back());
          break;
        }
        default:
          reject(path + ".op",
                 "one of \"append\", \"step\", \"reset\", \"truncate\", \"fork\", got op "
                 "kind #" +
                     str(static_cast<int>(op.kind)));
      }
    }
  }

  // The resolved pool (an explicit list's length, pool_pages, or the pages the program
  // needs) must fit kMaxPoolElements K and V elements.
  void check_pool_elements(const Placement& placement, int required) {
    int64_t pages = required;
    std::string path = "$.placement";
    std::string source = "the program needs";
    if (placement.order == PageOrder::explicit_list) {
      pages = static_cast<int64_t>(placement.pages.size());
      path = "$.placement.page_order";
      source = "the length of page_order";
    } else if (placement.pool_pages) {
      pages = *placement.pool_pages;
      path = "$.placement.pool_pages";
      source = "pool_pages";
    }
    const int64_t per_page = int64_t{layout_.page_size} * layout_.kv_heads *
                             (int64_t{layout_.head_dim} + layout_.value_dim);
    if (pages * per_page > limits::kMaxPoolElements) {
      reject(path, "a page pool of at most " + str(limits::kMaxPoolElements) +
                       " K and V elements (pages x page_size x kv_heads x (head_dim + "
                       "value_dim)), got " +
                       str(pages * per_page) + " (" + count_text(pages, "page", "pages") + " (" +
                       source + ") x " + str(per_page) + " elements each)");
    }
  }

  void check_placement() {
    const Placement& placement = s_.placement;
    const int required = required_pool_pages(s_);
    const std::string needs = " (the program needs " + str(required) + ")";
    switch (placement.order) {
      case PageOrder::identity:
      case PageOrder::reversed:
        if (!placement.pages.empty()) {
          reject("$.placement.page_order",
                 "no explicit page list unless page_order is a list, got " +
                     count_text(static_cast<int64_t>(placement.pages.size()), "page", "pages"));
        }
        if (placement.pool_pages) {
          const int pool = *placement.pool_pages;
          if (pool < required) {
            reject("$.placement.pool_pages", "at least " + count_text(required, "page", "pages") +
                                                 needs + ", got " + str(pool));
          }
          check_range("$.placement.pool_pages", pool, required, limits::kMaxPoolPages);
        }
        break;
      case PageOrder::explicit_list: {
        const auto n = static_cast<int64_t>(placement.pages.size());
        if (n > limits::kMaxPoolPages) {
          reject("$.placement.page_order",
                 "at most " + str(limits::kMaxPoolPages) + " pages, got " + str(n));
        }
        std::vector<bool> seen(placement.pages.size(), false);
        for (size_t i = 0; i < placement.pages.size(); ++i) {
          const int page = placement.pages[i];
          const std::string path = at("$.placement.page_order", i);
          if (page < 0 || page >= n) {
            reject(path, "a page in [0, " + str(n) + ") (the list has " +
                             count_text(n, "page", "pages") + "), got " + str(page));
          }
          if (seen[static_cast<size_t>(page)]) {
            reject(path, "each page of 0.." + str(n - 1) + " exactly once (a permutation), got " +
                             str(page) + " again");
          }
          seen[static_cast<size_t>(page)] = true;
        }
        if (n < required) {
          reject("$.placement.page_order",
                 "at least " + count_text(required, "page", "pages") + needs + ", got " + str(n));
        }
        if (placement.pool_pages && *placement.pool_pages != n) {
          reject("$.placement.pool_pages",
                 str(n) + " (the length of page_order), got " + str(*placement.pool_pages));
        }
        break;
      }
      default:
        reject("$.placement.page_order",
               "\"identity\", \"reversed\" or a list of pages, got "
               "page order #" +
                   str(static_cast<int>(placement.order)));
    }
    check_pool_elements(placement, required);
    if (parse_poison(poison_name(placement.poison)) != placement.poison) {
      reject("$.placement.poison", "one of \"nan\", \"+inf\", \"-inf\", \"huge\", got poison #" +
                                       str(static_cast<int>(placement.poison)));
    }
  }

  void judge_expect() {
    const auto rows = static_cast<int64_t>(s_.expect.size());
    if (rows > limits::kMaxExpectRows) {
      reject("$.expect", "at most " + str(limits::kMaxExpectRows) + " rows, got " + str(rows));
    }
    if (model_ && rows > 0) {
      reject("$.expect",
             "no expect rows in a model scenario (logits are checked against the "
             "reference transformer), got " +
                 count_text(rows, "row", "rows"));
    }
    std::set<std::tuple<int, int, int64_t>> keys;
    for (size_t i = 0; i < s_.expect.size(); ++i) {
      const ExpectedRow& row = s_.expect[i];
      const std::string path = at("$.expect", i);
      check_seq(path + ".seq", row.seq);
      const auto& epochs = epochs_[static_cast<size_t>(row.seq)];
      const auto epoch_count = static_cast<int64_t>(epochs.size());
      if (row.epoch < 0 || row.epoch >= epoch_count) {
        reject(path + ".epoch",
               "an epoch in [0, " + str(epoch_count) + ") (sequence " + str(row.seq) + " has " +
                   count_text(epoch_count, "epoch", "epochs") + "), got " + str(row.epoch));
      }
      const int64_t length = epochs[static_cast<size_t>(row.epoch)];
      const int64_t first =
          inherited_[static_cast<size_t>(row.seq)][static_cast<size_t>(row.epoch)];
      if (row.pos < first || row.pos >= length) {
        reject(path + ".pos", "a position in [" + str(first) + ", " + str(length) + ") (sequence " +
                                  str(row.seq) + " epoch " + str(row.epoch) + " has " +
                                  count_text(length, "token", "tokens") +
                                  (first > 0 ? ", the first " + str(first) + " inherited" : "") +
                                  "), got " + str(row.pos));
      }
      if (!keys.emplace(row.seq, row.epoch, row.pos).second) {
        reject(path, "each (seq, epoch, pos) at most once, got (" + str(row.seq) + ", " +
                         str(row.epoch) + ", " + str(row.pos) + ") again");
      }
      const std::string values = path + ".values";
      if (row.values.size() != static_cast<size_t>(layout_.q_heads)) {
        reject(values, count_text(layout_.q_heads, "head", "heads") + " (q_heads), got " +
                           str(static_cast<int64_t>(row.values.size())));
      }
      for (size_t h = 0; h < row.values.size(); ++h) {
        if (row.values[h].size() != static_cast<size_t>(layout_.value_dim)) {
          reject(at(values, h), count_text(layout_.value_dim, "number", "numbers") +
                                    " (value_dim), got " +
                                    str(static_cast<int64_t>(row.values[h].size())));
        }
        for (size_t d = 0; d < row.values[h].size(); ++d) {
          if (!std::isfinite(row.values[h][d])) {
            reject(at(at(values, h), d), "a finite number, got " + num(row.values[h][d]));
          }
        }
      }
    }
  }

  void check_provenance() {
    const Provenance& p = s_.provenance;
    if (p.source != "hand" && p.source != "check" && p.source != "shrink" && p.source != "fuzz") {
      reject("$.provenance.source", "one of \"hand\", \"check\", \"shrink\", \"fuzz\", got \"" +
                                        p.source.substr(0, 40) + "\"");
    }
    const std::pair<const char*, const std::optional<std::string>*> texts[] = {
        {"$.provenance.engine", &p.engine},
        {"$.provenance.property", &p.property},
        {"$.provenance.failure", &p.failure},
        {"$.provenance.kvfuzz_version", &p.kvfuzz_version}};
    for (const auto& [path, text] : texts) {
      if (*text) check_text(path, **text, 0, "a string");
    }
  }
};

}  // namespace

std::optional<FieldError> validate(const Scenario& scenario) {
  try {
    Validator(scenario).run();
  } catch (const Invalid& invalid) {
    return invalid.error;
  }
  return std::nullopt;
}

}  // namespace kvfuzz
