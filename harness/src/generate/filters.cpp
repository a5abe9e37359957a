// The filters (generator.h, GeneratorFilters): the dtypes both the engine and the filter
// allow, and why a set of filters cannot be met. generate_scenario checks the filters before
// it draws anything and refuses those that conflict; the others it meets by forcing drawn
// choices, never by rejecting and redrawing. Draws nothing.
#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "generate/bounds.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {

// At model level every token of the program is a vocabulary id (limits::kMaxModelVocab);
// a minimum context must leave room for the others.
constexpr int kMostModelContext = 1024;

std::vector<DType> filtered_dtypes(const GeneratorOptions& o) {
  std::vector<DType> dtypes = o.supports.dtypes;
  const std::vector<DType>& wanted = o.filters.dtypes;
  if (wanted.empty()) return dtypes;
  std::erase_if(
      dtypes, [&](DType d) { return std::find(wanted.begin(), wanted.end(), d) == wanted.end(); });
  return dtypes;
}

std::optional<FilterConflict> filter_conflict(const GeneratorOptions& o) {
  using Filter = FilterConflict::Filter;
  const GeneratorFilters& f = o.filters;
  const auto names = [](const std::vector<DType>& dtypes) {
    std::string out;
    for (DType d : dtypes) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
    return out;
  };
  if (!f.dtypes.empty() && filtered_dtypes(o).empty()) {
    return FilterConflict{Filter::dtypes, "expected a supported storage dtype (" +
                                              names(o.supports.dtypes) + "), got " +
                                              names(f.dtypes)};
  }
  if (o.supports.rope_required && f.rope == OnOff::off) {
    return FilterConflict{Filter::rope,
                          "expected RoPE on or any (the engine supports only "
                          "RoPE layouts), got off"};
  }
  if (!o.supports.windows && f.window == OnOff::on) {
    return FilterConflict{Filter::window,
                          "expected windows off or any (the engine supports "
                          "no windows), got on"};
  }
  for (const FeatureName& feature : kFeatureNames) {
    if (f.features.*feature.wanted && (!(o.supports.*feature.supported) || o.model)) {
      return FilterConflict{Filter::features,
                            "expected features the engine declares, got " +
                                std::string(feature.name) +
                                (o.model ? " (model scenarios have no attention features)"
                                         : " (not in its supports)")};
    }
  }
  // MLA's layouts carry RoPE only in a part of the key (rope_dims) the engine declares.
  const bool mla_rope = o.supports.rope_dims;
  if (f.features.value_from_key && (f.rope == OnOff::on || o.supports.rope_required) && !mla_rope) {
    return FilterConflict{Filter::features,
                          "expected no RoPE with value_from_key (MLA's RoPE turns a part of the "
                          "key, rope_dims, which the engine does not declare), got RoPE on"};
  }
  for (const auto& [wanted, name, says] :
       {std::tuple{f.features.rope_interleaved, "rope_interleaved", "which pairs"},
        std::tuple{f.features.rope_dims, "rope_dims", "which elements"}}) {
    if (wanted && (f.rope == OnOff::off || (f.features.value_from_key && !mla_rope))) {
      return FilterConflict{
          Filter::features,
          "expected RoPE with " + std::string(name) + " (it says " + says + " RoPE turns), got " +
              std::string(f.rope == OnOff::off ? "--rope off" : "value_from_key (no RoPE)")};
    }
  }
  if ((f.features.rope_dims || (f.features.value_from_key && mla_rope && f.rope == OnOff::on)) &&
      most_head_dim(o) < 4) {
    return FilterConflict{Filter::features,
                          "expected a head_dim bound of 4 or more with rope_dims (RoPE's part "
                          "leaves at least one pair out), got " +
                              std::to_string(most_head_dim(o))};
  }
  if (f.features.value_from_key && std::ranges::any_of(f.kv_formats, is_channel)) {
    return FilterConflict{Filter::features,
                          "expected no per-channel KV format with value_from_key (a value is "
                          "one key's row; a per-channel group is many keys'), got --kv-format "
                          "with one"};
  }
  if (f.features.value_from_key && std::ranges::any_of(f.kv_formats, is_affine)) {
    return FilterConflict{Filter::features,
                          "expected no affine KV format with value_from_key (the generator "
                          "draws a latent cache in fp8 or ggml's blocks, not in affine groups), "
                          "got --kv-format with one"};
  }
  for (const KvQuant quant : f.kv_formats) {
    const bool declared = is_fp8(quant)       ? o.supports.kv_fp8
                          : is_affine(quant)  ? o.supports.kv_affine
                          : is_channel(quant) ? o.supports.kv_channel
                                              : o.supports.kv_ggml_blocks;
    const bool model_refuses = o.model && (is_fp8(quant) || is_channel(quant));
    if (!declared || model_refuses) {
      return FilterConflict{
          Filter::kv_formats,
          "expected KV formats the engine declares, got " + std::string(kv_quant_name(quant)) +
              (model_refuses && is_fp8(quant) ? " (model scenarios have no fp8 KV cache)"
               : model_refuses                ? " (model scenarios have no per-channel keys)"
               : is_fp8(quant)                ? " (it does not declare kv_fp8)"
               : is_affine(quant)             ? " (it does not declare kv_affine)"
               : is_channel(quant)            ? " (it does not declare kv_channel)"
                                              : " (it does not declare kv_ggml_blocks)")};
    }
    if ((is_ggml_block(quant) || is_affine(quant)) && most_head_dim(o) < kGgmlBlock) {
      return FilterConflict{Filter::kv_formats, "expected head_dim of at least 32 for " +
                                                    std::string(kv_quant_name(quant)) +
                                                    ", but head_dim is at most " +
                                                    std::to_string(most_head_dim(o)) + " here"};
    }
  }
  if ((f.rope == OnOff::on || o.supports.rope_required) && most_head_dim(o) < 2) {
    return FilterConflict{Filter::rope,
                          "expected head_dim of at least 2 for RoPE, but head_dim "
                          "is at most 1 here"};
  }
  if (f.min_sequences < 1 || f.max_sequences < 0) {
    return FilterConflict{Filter::sequences, "expected at least 1 sequence"};
  }
  if (f.min_sequences > most_sequences(o)) {
    return FilterConflict{Filter::sequences,
                          "expected at most " + std::to_string(most_sequences(o)) +
                              " sequences here (8 at most, 2 with long contexts), got at least " +
                              std::to_string(f.min_sequences)};
  }
  if (f.max_context < 0) {
    return FilterConflict{Filter::max_context, "expected a positive number of tokens"};
  }
  if (f.min_context > most_context(o)) {
    return FilterConflict{Filter::min_context,
                          "expected at most " + std::to_string(most_context(o)) +
                              " tokens (the most one epoch may hold with these sizes and "
                              "supports), got " +
                              std::to_string(f.min_context)};
  }
  if (o.model && f.min_context > kMostModelContext) {
    return FilterConflict{Filter::min_context,
                          "expected at most " + std::to_string(kMostModelContext) +
                              " tokens at model level, got " + std::to_string(f.min_context)};
  }
  return std::nullopt;
}

}  // namespace kvfuzz
