// kvfuzz list: the built-in engines and mutants; with --engine SPEC, what each engine
// declares (capabilities, numerics, supports, bitwise claims), asked of the engine itself,
// so a user sees how kvfuzz will judge their plugin or exec engine before a run. Every field
// of the declarations' lists (kvfuzz/engine_fields.h) is shown: in words for those spelled
// out below, by its name for any other.
#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cli_support.h"
#include "commands.h"
#include "isolation_flags.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_fields.h"

namespace kvfuzz::cli {

namespace {

struct ListOptions {
  std::string engines;
  IsolationFlags isolation;  // --timeout, --no-fork: declarations asked in a child
};

std::string yes_no(bool value) {
  return value ? "yes" : "no";
}

std::string said(const std::optional<bool>& value) {
  return value ? yes_no(*value) : "not said";
}

// "at most 256 tokens", or "any" for 0 (no limit beyond kvfuzz's own).
std::string limit(int value, const std::string& unit = "") {
  return value == 0 ? "any" : "at most " + std::to_string(value) + unit;
}

// A value as `list` shows a field that the phrases below do not spell out.
template <class T>
std::string shown(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return yes_no(value);
  } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
    return said(value);
  } else if constexpr (std::is_same_v<T, DType>) {
    return std::string(dtype_name(value));
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return value ? std::string(dtype_name(*value)) : "none";
  } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
    std::string names;
    for (const DType dtype : value) names += (names.empty() ? "" : ", ") + shown(dtype);
    return names.empty() ? "none" : names;
  } else {
    return std::to_string(value);
  }
}

// Whether Struct's field list (kvfuzz/engine_fields.h) has a field of this name.
template <Declared Struct>
constexpr bool has_field(std::string_view name) {
  bool found = false;
  for_each_field<Struct>([&](const auto& field) { found = found || field.name == name; });
  return found;
}

template <Declared Struct, size_t N>
constexpr bool all_fields(const std::array<std::string_view, N>& names) {
  return std::ranges::all_of(names, [](std::string_view name) { return has_field<Struct>(name); });
}

// "; NAME VALUE" for each field of `declared` not in `spelled`: a field added to a
// declaration is shown, by its name, before anyone writes a phrase for it here.
template <Declared Struct, size_t N>
std::string the_rest(const Struct& declared, const std::array<std::string_view, N>& spelled) {
  std::string text;
  for_each_field<Struct>([&](const auto& field) {
    if (std::ranges::find(spelled, field.name) != spelled.end()) return;
    text += "; " + std::string(field.name) + " " + shown(declared.*field.member);
  });
  return text;
}

// The fields numerics_text() and supports_text() spell out in their own words.
constexpr std::array<std::string_view, 14> kNumericsSpelled = {"rope_tables",
                                                               "output",
                                                               "p",
                                                               "score_accumulation",
                                                               "value_accumulation",
                                                               "rotated_keys_in_storage",
                                                               "rotated_queries_in_storage",
                                                               "rope_angles_exact",
                                                               "split_combine_lse",
                                                               "split_partials",
                                                               "p_normalised",
                                                               "exp_ulps",
                                                               "query_blocks",
                                                               "activations"};
constexpr std::array<std::string_view, 21> kSupportsSpelled = {
    "dtypes",         "head_dim_multiple",
    "max_head_dim",   "max_q_heads",
    "max_context",    "value_dim_is_head_dim",
    "rope_required",  "windows",
    "softcap",        "sinks",
    "alibi",          "chunked_local",
    "kv_fp8",         "kv_ggml_blocks",
    "kv_affine",      "kv_channel",
    "kv_one_format",  "kv_tensor_scales",
    "value_from_key", "rope_interleaved",
    "rope_dims"};
static_assert(all_fields<EngineNumerics>(kNumericsSpelled));
static_assert(all_fields<EngineSupports>(kSupportsSpelled));

std::string numerics_text(const EngineNumerics& n) {
  return "output " + std::string(dtype_name(n.output)) + ", P " +
         (n.p ? "rounded to " + std::string(dtype_name(*n.p)) : std::string("not rounded")) +
         ", score sums " + std::string(dtype_name(n.score_accumulation)) + ", value sums " +
         std::string(dtype_name(n.value_accumulation)) + "; with RoPE: rotated keys in storage " +
         said(n.rotated_keys_in_storage) + ", rotated queries in storage " +
         said(n.rotated_queries_in_storage) + ", angles in double " + said(n.rope_angles_exact) +
         "; split partials " +
         (n.split_combine_lse ? "normalised, combined by log-sum-exp" : "combined rescaled") +
         ", stored in " + std::string(dtype_name(n.split_partials)) + "; P normalised first " +
         yes_no(n.p_normalised) + "; RoPE tables in " + std::string(dtype_name(n.rope_tables)) +
         "; exp within " + std::to_string(n.exp_ulps) + (n.exp_ulps == 1 ? " ulp" : " ulps") +
         "; q quantized to K's ggml blocks " + yes_no(n.query_blocks) +
         "; a whole model's weights and activations in " + std::string(dtype_name(n.activations)) +
         the_rest(n, kNumericsSpelled);
}

// "softcap, alibi": the attention features declared (the quantized KV formats apart),
// "none" for none.
std::string features_text(const EngineSupports& s) {
  std::string names;
  for_each_field<EngineSupports>([&](const auto& field) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s.*field.member)>, bool>) {
      const bool feature = std::find(kFeatureSupports.begin(), kFeatureSupports.end(),
                                     field.member) != kFeatureSupports.end();
      const bool kv = field.member == &EngineSupports::kv_fp8 ||
                      field.member == &EngineSupports::kv_ggml_blocks ||
                      field.member == &EngineSupports::kv_affine ||
                      field.member == &EngineSupports::kv_channel;
      if (feature && !kv && s.*field.member)
        names += (names.empty() ? "" : ", ") + std::string(field.name);
    }
  });
  return names.empty() ? "none" : names;
}

// "fp8, ggml blocks, affine groups": the quantized KV formats declared, "none" for none,
// then how narrowly ("; K and V in one format; one fp8 scale per tensor").
std::string kv_formats_text(const EngineSupports& s) {
  std::string names;
  for (const auto& [declared, name] :
       {std::pair{s.kv_fp8, "fp8"}, std::pair{s.kv_ggml_blocks, "ggml blocks"},
        std::pair{s.kv_affine, "affine groups"}, std::pair{s.kv_channel, "per-channel keys"}}) {
    if (declared) names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return (names.empty() ? "none" : names) + (s.kv_one_format ? "; K and V in one format" : "") +
         (s.kv_tensor_scales ? "; one fp8 scale per tensor" : "");
}

std::string supports_text(const EngineSupports& s) {
  std::string head_dim = limit(s.max_head_dim);
  if (s.head_dim_multiple > 1) {
    head_dim = "a multiple of " + std::to_string(s.head_dim_multiple) +
               (s.max_head_dim == 0 ? "" : ", " + head_dim);
  }
  return "storage " + shown(s.dtypes) + "; head_dim " + head_dim +
         (s.value_dim_is_head_dim ? " (value_dim = head_dim)" : "") + "; q heads " +
         limit(s.max_q_heads) + "; context " + limit(s.max_context, " tokens") +
         (s.rope_required ? "; RoPE only" : "") + (s.windows ? "" : "; no windows") +
         "; attention features " + features_text(s) + "; quantized KV " + kv_formats_text(s) +
         the_rest(s, kSupportsSpelled);
}

// "truncate yes, fork no": every capability by its name.
std::string capabilities_text(const EngineCapabilities& can) {
  std::string text;
  for_each_field<EngineCapabilities>([&](const auto& field) {
    text += (text.empty() ? "" : ", ") + std::string(field.name) + " " + yes_no(can.*field.member);
  });
  return text;
}

// The names of the invariances claimed bit for bit.
std::string bitwise_text(const BitwiseClaims& b) {
  std::string claims;
  for_each_field<BitwiseClaims>([&](const auto& field) {
    if (b.*field.member) claims += (claims.empty() ? "" : ", ") + std::string(field.name);
  });
  return claims.empty() ? "none (every property judged within its tolerance)" : claims;
}

void print_declarations(const EngineInfo& engine, const IsolationFlags& isolation) {
  // Asked in a child: an engine that crashes or hangs when made is one line, status 3.
  const EngineDeclarations declared = declarations_of(engine, isolation);
  std::printf("engine        %s (%s)\n", engine.name.c_str(), engine.mutant ? "mutant" : "honest");
  if (!engine.description.empty()) std::printf("description   %s\n", engine.description.c_str());
  if (declared.whole_model) {
    std::printf(
        "runs          whole models (vocabulary ids in, logits out): model scenarios only\n");
  }
  std::printf("capabilities  %s\n", capabilities_text(declared.capabilities).c_str());
  std::printf("numerics      %s\n", numerics_text(declared.numerics).c_str());
  std::printf("supports      %s\n", supports_text(declared.supports).c_str());
  std::printf("bitwise       %s\n", bitwise_text(declared.bitwise).c_str());
}

void print_registry() {
  std::printf("%-24s %-7s %s\n", "engine", "kind", "description");
  for (const EngineInfo& info : engine_registry()) {
    std::printf("%-24s %-7s %s\n", info.name.c_str(), info.mutant ? "mutant" : "honest",
                info.description.c_str());
  }
  std::printf(
      "\nwhole-model engines (vocabulary ids in, logits out: model scenarios only; named "
      "on their own, never by all, mutants or every):\n");
  for (const EngineInfo& info : model_engine_registry()) {
    std::printf("%-24s %-7s %s\n", info.name.c_str(), info.mutant ? "mutant" : "honest",
                info.description.c_str());
  }
  std::printf("\nkvfuzz list --engine SPEC shows what an engine declares (yours too).\n");
}

}  // namespace

void add_list_command(CLI::App& app, int& /*exit_status*/) {
  auto options = std::make_shared<ListOptions>();
  CLI::App* cmd = app.add_subcommand(
      "list",
      "Name the built-in engines and mutants; with --engine, what each engine declares:\n"
      "capabilities, numerics, supports and bitwise claims (docs/writing-an-engine.md).");
  const CLI::Option* engine = cmd->add_option("--engine", options->engines, kEnginesHelp);
  add_isolation_options(*cmd, options->isolation,
                        "Seconds an engine may take to be made and give its declarations in its "
                        "child before it is killed",
                        "Ask engines in this process: no crash isolation and no --timeout, but a "
                        "debugger sees the engine");
  cmd->callback([options, engine] {
    if (engine->count() == 0) return print_registry();
    const auto engines = select_engines(options->engines);
    for (size_t i = 0; i < engines.size(); ++i) {
      if (i > 0) std::printf("\n");
      print_declarations(*engines[i], options->isolation);
    }
  });
}

}  // namespace kvfuzz::cli
