#include <algorithm>
#include <cstddef>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvfuzz/engine_fields.h"
#include "kvfuzz/orchestrate.h"

namespace kvfuzz {

namespace {

// The supports of an engine that takes every layout: the defaults.
const EngineSupports kEvery;

// The fields of EngineSupports that are not booleans, each merged by a rule of its own in
// common_supports below (the booleans are merged by one rule for all).
template <class T>
constexpr size_t kNotBool = std::is_same_v<T, bool> ? 0 : 1;
constexpr size_t not_booleans() {
  size_t count = 0;
  for_each_field<EngineSupports>([&](const auto& field) {
    count += kNotBool<std::remove_cvref_t<decltype(EngineSupports{}.*field.member)>>;
  });
  return count;
}
static_assert(not_booleans() == 5,
              "a support that is not a boolean needs its rule in common_supports");

}  // namespace

EngineSupports common_supports(std::span<const NamedDeclarations> engines) {
  EngineSupports common;
  std::vector<DType> any;
  const auto tighter = [](int a, int b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); };
  for (const NamedDeclarations& engine : engines) {
    const EngineSupports& s = engine.declared.supports;
    std::erase_if(common.dtypes, [&](DType d) {
      return std::find(s.dtypes.begin(), s.dtypes.end(), d) == s.dtypes.end();
    });
    for (DType d : s.dtypes) {
      if (std::find(any.begin(), any.end(), d) == any.end()) any.push_back(d);
    }
    common.head_dim_multiple = std::lcm(common.head_dim_multiple, std::max(1, s.head_dim_multiple));
    common.max_head_dim = tighter(common.max_head_dim, s.max_head_dim);
    common.max_q_heads = tighter(common.max_q_heads, s.max_q_heads);
    common.max_context = tighter(common.max_context, s.max_context);
    // A boolean support, away from its default (every layout), narrows the layouts: the
    // common one narrows when any engine's does (value_dim_is_head_dim, rope_required: any
    // of them; windows: all of them).
    for_each_field<EngineSupports>([&](const auto& field) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s.*field.member)>, bool>) {
        const bool feature = std::find(kFeatureSupports.begin(), kFeatureSupports.end(),
                                       field.member) != kFeatureSupports.end();
        if (!feature && s.*field.member != kEvery.*field.member) {
          common.*field.member = s.*field.member;
        }
      }
    });
  }
  // An attention feature is drawn when some engine computes it; the engines that do not
  // skip the cases that have it (as they skip a dtype they lack). The generator keeps
  // features to about one case in three (generate/features.h), so the others still run
  // most cases.
  for (bool EngineSupports::*feature : kFeatureSupports) {
    common.*feature = std::any_of(engines.begin(), engines.end(), [&](const NamedDeclarations& e) {
      return e.declared.supports.*feature;
    });
  }
  if (common.dtypes.empty()) common.dtypes = any;
  return common;
}

namespace {

// Lowers the generator's maximum and typical size to `limit` (0: none).
void cap(int limit, int& most, int& typical) {
  if (limit <= 0) return;
  most = std::min(most, limit);
  typical = std::min(typical, limit);
}

// Model scenarios when asked, or when every engine runs whole models; an attention
// scenario says nothing about a whole-model engine, so a mix needs caps.model.
bool model_scenarios(std::span<const NamedDeclarations> engines, bool asked) {
  std::string whole, attention;
  for (const NamedDeclarations& engine : engines) {
    std::string& names = engine.declared.whole_model ? whole : attention;
    names += (names.empty() ? "" : ", ") + engine.name;
  }
  if (!whole.empty() && !attention.empty() && !asked) {
    throw DeclarationError(whole + " run whole models only (model scenarios), the others (" +
                           attention +
                           ") attention too: add --model to judge them all at model level, or "
                           "check them apart");
  }
  return asked || (!whole.empty() && attention.empty());
}

}  // namespace

GeneratorOptions generator_options_from_declarations(std::span<const NamedDeclarations> engines,
                                                     const SizeCaps& caps, GeneratorOptions base) {
  GeneratorOptions generator = std::move(base);
  for (const NamedDeclarations& engine : engines) {
    if (engine.declared.supports.dtypes.empty()) {
      throw DeclarationError(engine.name + " supports no storage dtype");
    }
    if (engine.declared.numerics.score_accumulation == DType::f16) {
      generator.max_score_spread_log2 = std::min(generator.max_score_spread_log2, 15);
    }
    generator.truncate = generator.truncate && engine.declared.capabilities.truncate;
    generator.fork = generator.fork && engine.declared.capabilities.fork;
  }
  if (!engines.empty()) generator.supports = common_supports(engines);
  if (caps.max_tokens > generator.max_epoch_tokens) {
    generator.long_context = LongContextOptions{caps.max_tokens};
  } else {
    cap(caps.max_tokens, generator.max_epoch_tokens, generator.typical_epoch_tokens);
  }
  cap(caps.max_head_dim, generator.max_head_dim, generator.typical_head_dim);
  cap(caps.max_q_heads, generator.max_q_heads, generator.typical_q_heads);
  if (caps.max_sequences > 0) {
    generator.max_sequences = std::min(generator.max_sequences, caps.max_sequences);
  }
  if (caps.max_ops > 0) generator.max_ops = std::min(generator.max_ops, caps.max_ops);
  // No head_dim could be drawn: say so now rather than generate outside the supports.
  const EngineSupports& can = generator.supports;
  const int most_dim = std::min(can.max_head_dim > 0 ? can.max_head_dim : 128,
                                generator.long_context ? 16 : generator.max_head_dim);
  if (can.head_dim_multiple > most_dim) {
    throw DeclarationError("head_dim must be a multiple of " +
                           std::to_string(can.head_dim_multiple) + ", but is at most " +
                           std::to_string(most_dim) +
                           " here (the head_dim cap; long contexts: 16)");
  }
  if (model_scenarios(engines, caps.model || generator.model) && !generator.model) {
    generator.model = ModelOptions{};
  }
  return generator;
}

}  // namespace kvfuzz
