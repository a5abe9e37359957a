#include "check_filters.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>
#include <vector>

#include "cli_support.h"
#include "kvfuzz/dtype.h"

namespace kvfuzz::cli {

namespace {

// The items of a comma-separated list, empty ones included (so "f16," is an error).
std::vector<std::string_view> items(std::string_view list) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc{} || stop != end) return std::nullopt;
  return value;
}

std::vector<DType> parse_dtypes(const std::string& list) {
  std::vector<DType> dtypes;
  for (std::string_view name : items(list)) {
    const std::optional<DType> dtype = parse_dtype(name);
    if (!dtype) {
      throw UsageError("--dtype: unknown storage dtype '" + std::string(name) +
                       "'; expected a comma-separated list of f32, f16, bf16");
    }
    if (std::find(dtypes.begin(), dtypes.end(), *dtype) == dtypes.end()) dtypes.push_back(*dtype);
  }
  return dtypes;
}

OnOff parse_on_off(const std::string& flag, const std::string& value) {
  if (value.empty() || value == "any") return OnOff::any;
  if (value == "on") return OnOff::on;
  if (value == "off") return OnOff::off;
  throw UsageError(flag + ": expected on, off or any, got '" + value + "'");
}

AllowedOps parse_without(const std::string& list) {
  AllowedOps ops;
  if (list.empty()) return ops;
  for (std::string_view name : items(list)) {
    if (name == "truncate") {
      ops.truncate = false;
    } else if (name == "fork") {
      ops.fork = false;
    } else if (name == "reset") {
      ops.reset = false;
    } else if (name == "batch") {
      ops.batch = false;
    } else {
      throw UsageError("--without: unknown op '" + std::string(name) +
                       "'; expected a comma-separated list of truncate, fork, reset, batch");
    }
  }
  return ops;
}

FeatureSet parse_features(const std::string& list) {
  FeatureSet features;
  if (list.empty()) return features;
  for (std::string_view name : items(list)) {
    const auto* feature = std::find_if(kFeatureNames.begin(), kFeatureNames.end(),
                                       [&](const FeatureName& f) { return f.name == name; });
    if (feature == kFeatureNames.end()) {
      std::string known;
      for (const FeatureName& f : kFeatureNames)
        known += (known.empty() ? "" : ", ") + std::string(f.name);
      throw UsageError("--feature: unknown attention feature '" + std::string(name) +
                       "'; expected a comma-separated list of " + known);
    }
    features.*feature->wanted = true;
  }
  return features;
}

std::vector<KvQuant> parse_kv_formats(const std::string& list) {
  std::vector<KvQuant> formats;
  if (list.empty()) return formats;
  for (std::string_view name : items(list)) {
    const std::optional<KvQuant> quant = parse_kv_quant(name);
    if (!quant || *quant == KvQuant::none) {
      std::string known;
      for (const KvQuant q : kQuantizedFormats) {
        known += (known.empty() ? "" : ", ") + std::string(kv_quant_name(q));
      }
      throw UsageError("--kv-format: unknown KV format '" + std::string(name) +
                       "'; expected a comma-separated list of " + known);
    }
    if (std::find(formats.begin(), formats.end(), *quant) == formats.end()) {
      formats.push_back(*quant);
    }
  }
  return formats;
}

// N (exactly N) or MIN-MAX, within 1..8 (the generator's most sequences).
void parse_sequences(const std::string& text, GeneratorFilters& filters) {
  if (text.empty()) return;
  const size_t dash = text.find('-');
  const std::optional<int> lo = parse_int(std::string_view(text).substr(0, dash));
  const std::optional<int> hi =
      dash == std::string::npos ? lo : parse_int(std::string_view(text).substr(dash + 1));
  if (!lo || !hi || *lo < 1 || *lo > *hi || *hi > 8) {
    throw UsageError("--sequences: expected N or MIN-MAX with 1 <= MIN <= MAX <= 8, got '" + text +
                     "'");
  }
  filters.min_sequences = *lo;
  filters.max_sequences = *hi;
}

std::string flag_of(FilterConflict::Filter filter) {
  switch (filter) {
    case FilterConflict::Filter::dtypes:
      return "--dtype";
    case FilterConflict::Filter::rope:
      return "--rope";
    case FilterConflict::Filter::window:
      return "--window";
    case FilterConflict::Filter::sequences:
      return "--sequences";
    case FilterConflict::Filter::max_context:
      return "--max-context";
    case FilterConflict::Filter::min_context:
      return "--min-context";
    case FilterConflict::Filter::features:
      return "--feature";
    case FilterConflict::Filter::kv_formats:
      return "--kv-format";
  }
  return "filters";
}

}  // namespace

void add_filter_options(CLI::App& cmd, CaseFilters& filters) {
  const std::string group = "Focusing a run (docs/filters.md; a case seed needs the same flags)";
  cmd.add_option("--dtype", filters.dtypes,
                 "Only these storage dtypes (comma-separated: f32, f16, bf16), among those the "
                 "engines support")
      ->type_name("LIST")
      ->group(group);
  cmd.add_option("--window", filters.window,
                 "Sliding window in every scenario (on), in none (off) or either (any, the "
                 "default)")
      ->type_name("on|off|any")
      ->group(group);
  cmd.add_option("--rope", filters.rope,
                 "RoPE in every scenario (on), in none (off) or either (any, the default)")
      ->type_name("on|off|any")
      ->group(group);
  cmd.add_option("--without", filters.without,
                 "Programs without these ops (comma-separated: truncate, fork, reset, batch; "
                 "batch: steps over more than one sequence); appends take their place")
      ->type_name("LIST")
      ->group(group);
  cmd.add_option("--sequences", filters.sequences,
                 "Exactly N sequences, or MIN-MAX (1..8; long contexts: at most 2)")
      ->type_name("N|MIN-MAX")
      ->group(group);
  cmd.add_option("--max-context", filters.max_context,
                 "At most N tokens in any sequence's request (epoch), whatever the sizes: caps "
                 "the long contexts of --max-tokens too")
      ->check(CLI::Range(1, 16384))
      ->type_name("N")
      ->group(group);
  cmd.add_option("--min-context", filters.min_context,
                 "Some sequence's request (epoch) reaches at least N tokens in every case: one "
                 "more append brings the longest to N when the drawn program does not")
      ->check(CLI::Range(1, 16384))
      ->type_name("N")
      ->group(group);
  cmd.add_option("--feature", filters.features,
                 "Every scenario has these attention features (comma-separated: softcap, sinks, "
                 "alibi, chunked_local, value_from_key, rope_interleaved, rope_dims), which every "
                 "engine must declare")
      ->type_name("LIST")
      ->group(group);
  cmd.add_option("--kv-format", filters.kv_formats,
                 "Every scenario stores K and V quantized, each in one of these formats "
                 "(comma-separated: fp8_e4m3fn, fp8_e5m2, q8_0, q4_0, q4_1, q5_0, q5_1, affine2, "
                 "affine4, affine8, channel_u8, channel_u4), which every engine must declare "
                 "(kv_fp8, kv_ggml_blocks, kv_affine, kv_channel); an affine format stores both K "
                 "and V, in one group size; a per-channel one K only")
      ->type_name("LIST")
      ->group(group);
}

void apply_filters(const CaseFilters& flags, GeneratorOptions& options) {
  GeneratorFilters& filters = options.filters;
  if (!flags.dtypes.empty()) filters.dtypes = parse_dtypes(flags.dtypes);
  filters.window = parse_on_off("--window", flags.window);
  filters.rope = parse_on_off("--rope", flags.rope);
  filters.ops = parse_without(flags.without);
  parse_sequences(flags.sequences, filters);
  // A run focused on more sequences than the default sizes' few may have them.
  options.max_sequences = std::max(options.max_sequences, filters.max_sequences);
  filters.max_context = flags.max_context;
  filters.min_context = flags.min_context;
  filters.features = parse_features(flags.features);
  filters.kv_formats = parse_kv_formats(flags.kv_formats);
  if (const std::optional<FilterConflict> conflict = filter_conflict(options)) {
    throw UsageError(flag_of(conflict->filter) + ": " + conflict->message);
  }
}

}  // namespace kvfuzz::cli
