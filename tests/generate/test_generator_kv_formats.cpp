// The quantized KV formats (generate/kv_formats.h): drawn only for an engine that declares
// kv_fp8 or kv_ggml_blocks, in about one scenario in four, every scenario valid and inside
// the supports (rows of 32 for a block format, block-quantized keys under RoPE too, fp8
// scales powers of two); an engine that declares neither gets no format and the same layout
// as before; --kv-format forces its formats on and is named when the engine lacks one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <stdexcept>
#include <variant>

#include "generate/count_scenarios.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {
namespace {

using test::count_with;
using test::kSeeds;

GeneratorOptions declaring(bool fp8, bool blocks) {
  GeneratorOptions o;
  o.supports.kv_fp8 = fp8;
  o.supports.kv_ggml_blocks = blocks;
  return o;
}

bool any_format(const Scenario& s, bool (*is)(KvQuant)) {
  return is(s.layout.k_format.quant) || is(s.layout.v_format.quant);
}

TEST(GeneratorKvFormats, DrawnInAboutOneScenarioInFourWithinTheRules) {
  const GeneratorOptions o = declaring(true, true);
  // 1/4: 300 of 1200 expected, sd 15; 240..360 is 4 sd.
  const int quantized = count_with(o, [](const Scenario& s) { return s.layout.quantized_kv(); });
  const int fp8 = count_with(o, [](const Scenario& s) { return any_format(s, &is_fp8); });
  const int blocks = count_with(o, [](const Scenario& s) { return any_format(s, &is_ggml_block); });
  std::printf("quantized %d, fp8 %d, ggml blocks %d of %d scenarios\n", quantized, fp8, blocks,
              kSeeds);
  EXPECT_GT(quantized, 240);
  EXPECT_LT(quantized, 360);
  EXPECT_GT(fp8, 40);
  EXPECT_GT(blocks, 40);
  int scaled = 0, unquantized_v = 0, mixed = 0, rotated_blocks = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource choices(seed);
    const Layout l = generate_scenario(choices, o).layout;
    rotated_blocks += is_ggml_block(l.k_format.quant) && l.rope_theta.has_value();
    for (const KvFormat* f : {&l.k_format, &l.v_format}) {
      EXPECT_EQ(f->scale.empty(), !is_fp8(f->quant)) << seed;
      for (const double s : f->scale) {
        int exponent = 0;
        EXPECT_EQ(std::frexp(s, &exponent), 0.5) << seed << ": scale " << s;
        scaled += s != 1.0;
      }
    }
    unquantized_v += l.k_format.quantized() && !l.v_format.quantized();
    mixed +=
        l.k_format.quantized() && l.v_format.quantized() && l.k_format.quant != l.v_format.quant;
  }
  EXPECT_GT(scaled, 40);
  // Keys under RoPE in a block format (the reference models the rotation's reach): RoPE
  // in about half the layouts, so about half the block keys.
  std::printf("block-quantized keys under RoPE: %d\n", rotated_blocks);
  EXPECT_GT(rotated_blocks, 40);
  EXPECT_GT(unquantized_v, 5);
  EXPECT_GT(mixed, 5);
}

TEST(GeneratorKvFormats, AnEngineDrawsOnlyTheFamilyItDeclares) {
  EXPECT_EQ(count_with(declaring(true, false),
                       [](const Scenario& s) { return any_format(s, &is_ggml_block); }),
            0);
  EXPECT_EQ(
      count_with(declaring(false, true), [](const Scenario& s) { return any_format(s, &is_fp8); }),
      0);
  // Declaring neither: no format, and the layout drawn before them is unchanged.
  const GeneratorOptions plain;
  EXPECT_EQ(count_with(plain, [](const Scenario& s) { return s.layout.quantized_kv(); }), 0);
  const GeneratorOptions fp8_only = declaring(true, false);
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Layout x = generate_scenario(a, plain).layout;
    const Layout y = generate_scenario(b, fp8_only).layout;
    EXPECT_TRUE(x.q_heads == y.q_heads && x.kv_heads == y.kv_heads && x.head_dim == y.head_dim &&
                x.value_dim == y.value_dim && x.page_size == y.page_size && x.dtype == y.dtype &&
                x.rope_theta == y.rope_theta)
        << seed;
  }
  PrngChoiceSource c(1);
  EXPECT_EQ(fixture_format_version(generate_scenario(c, plain)), 1);
}

TEST(GeneratorKvFormats, TheFilterForcesItsFormatsAndIsNamedWhenTheEngineLacksThem) {
  GeneratorOptions o = declaring(true, true);
  o.filters.kv_formats = {KvQuant::q4_0};
  EXPECT_EQ(count_with(o,
                       [](const Scenario& s) {
                         const KvQuant k = s.layout.k_format.quant, v = s.layout.v_format.quant;
                         return (k == KvQuant::q4_0 || v == KvQuant::q4_0) &&
                                (k == KvQuant::q4_0 || k == KvQuant::none) &&
                                (v == KvQuant::q4_0 || v == KvQuant::none);
                       }),
            kSeeds);
  GeneratorOptions lacking = declaring(true, false);
  lacking.filters.kv_formats = {KvQuant::fp8_e5m2, KvQuant::q8_0};
  const auto conflict = filter_conflict(lacking);
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->filter, FilterConflict::Filter::kv_formats);
  EXPECT_EQ(conflict->message,
            "expected KV formats the engine declares, got q8_0 (it does not declare "
            "kv_ggml_blocks)");
  PrngChoiceSource choices(1);
  EXPECT_THROW(generate_scenario(choices, lacking), std::invalid_argument);
  // At model level no fp8 is modelled: fp8 in the filter is named.
  GeneratorOptions model = declaring(true, true);
  model.model = ModelOptions{};
  model.filters.kv_formats = {KvQuant::fp8_e4m3fn};
  const auto refused = filter_conflict(model);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->message,
            "expected KV formats the engine declares, got fp8_e4m3fn (model scenarios have no "
            "fp8 KV cache)");
}

// Model level (pick_model_kv_formats): ggml's blocks or the affine groups drawn after every
// other choice, in about one scenario in four of an engine that declares them, at the model's
// own scale, heads of whole blocks or groups, an affine V in K's format and group; every
// other scenario is the one an engine without them gets; never fp8, whatever else is
// declared; the filter forces its formats.
TEST(GeneratorKvFormats, ModelScenariosDrawBlocksAndGroupsLastAtTheirRate) {
  GeneratorOptions o = declaring(true, true);
  o.supports.kv_affine = true;
  o.model = ModelOptions{};
  GeneratorOptions without = o;
  without.supports.kv_fp8 = without.supports.kv_ggml_blocks = without.supports.kv_affine = false;
  int quantized = 0, mixed = 0, v_unquantized = 0, widened = 0, unchanged = 0, affine = 0;
  std::set<KvQuant> seen;
  std::set<int> groups;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Scenario s = generate_scenario(a, o);
    const Scenario before = generate_scenario(b, without);
    ASSERT_TRUE(s.model) << seed;
    if (!s.layout.quantized_kv()) {
      unchanged += write_fixture(s) == write_fixture(before);
      continue;
    }
    ++quantized;
    const Layout& l = s.layout;
    ASSERT_FALSE(is_fp8(l.k_format.quant) || is_fp8(l.v_format.quant)) << seed;
    seen.insert(l.k_format.quant);
    EXPECT_EQ(l.head_dim % row_multiple(l.k_format), 0) << seed;
    EXPECT_FALSE(l.scale.has_value()) << seed;
    EXPECT_FALSE(validate(s)) << seed;
    if (is_affine(l.k_format.quant)) {
      ++affine;
      groups.insert(l.k_format.group);
      EXPECT_EQ(l.v_format, l.k_format) << seed;
    } else {
      EXPECT_TRUE(!l.v_format.quantized() || is_ggml_block(l.v_format.quant)) << seed;
    }
    mixed += l.v_format.quantized() && l.v_format.quant != l.k_format.quant;
    v_unquantized += !l.v_format.quantized();
    widened += l.head_dim != before.layout.head_dim;
    // Everything but the layout is the scenario drawn without the formats.
    EXPECT_EQ(s.program, before.program) << seed;
    EXPECT_EQ(*s.model, *before.model) << seed;
  }
  std::printf(
      "model level: %d of %d quantized (%zu formats; affine %d in %zu group sizes), V "
      "in another %d, V unquantized %d, heads widened %d; the %d others as without "
      "the support: %d\n",
      quantized, kSeeds, seen.size(), affine, groups.size(), mixed, v_unquantized, widened,
      kSeeds - quantized, unchanged);
  // 1/4: 300 of 1200 expected, sd 15; 240..360 is 4 sd (a few given up where the widened
  // model would pass the limits).
  EXPECT_GT(quantized, 240);
  EXPECT_LT(quantized, 360);
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_GT(affine, 60);
  EXPECT_EQ(groups.size(), 3u);
  EXPECT_GT(mixed, 5);
  EXPECT_GT(v_unquantized, 5);
  EXPECT_GT(widened, 100);
  EXPECT_EQ(unchanged, kSeeds - quantized);
  // The filter forces its format on K (and V, unless it is "another" of the filter's).
  o.filters.kv_formats = {KvQuant::q5_1};
  const int forced = count_with(o, [](const Scenario& s) {
    return s.layout.k_format.quant == KvQuant::q5_1 && s.layout.v_format.quant == KvQuant::q5_1;
  });
  std::printf("--kv-format q5_1 at model level: %d of %d\n", forced, kSeeds);
  EXPECT_GT(forced, kSeeds * 95 / 100);
  // An engine of the affine groups alone (mlx-lm's QuantizedKVCache) gets nothing else.
  GeneratorOptions mlx = o;
  mlx.filters.kv_formats.clear();
  mlx.supports.kv_fp8 = mlx.supports.kv_ggml_blocks = false;
  mlx.supports.kv_one_format = true;
  EXPECT_EQ(count_with(mlx,
                       [](const Scenario& s) {
                         return s.layout.quantized_kv() &&
                                !(is_affine(s.layout.k_format.quant) &&
                                  s.layout.v_format == s.layout.k_format);
                       }),
            0);
}

// MLX's affine groups (pick_affine_kv): drawn after every other choice, in about one in four
// of the scenarios that could hold one (no RoPE, no other format, no MLA, generated tokens),
// K and V in one format and group, the rows whole groups; every other scenario is the one
// an engine without kv_affine gets; the filter forces them and conflicts with RoPE on.
TEST(GeneratorKvFormats, AffineGroupsAreDrawnLastAtTheirRateForKAndVAlike) {
  GeneratorOptions o = declaring(true, true);
  o.supports.kv_affine = true;
  const int affine = count_with(o, [](const Scenario& s) { return any_format(s, &is_affine); });
  const int eligible = count_with(o, [](const Scenario& s) {
    return !(s.layout.quantized_kv() && !is_affine(s.layout.k_format.quant)) &&
           std::holds_alternative<GeneratedTokens>(s.tokens);
  });
  std::printf("affine KV formats in %d of %d eligible scenarios\n", affine, eligible);
  EXPECT_GT(affine, eligible / 4 - 60);
  EXPECT_LT(affine, eligible / 4 + 60);
  std::set<int> groups;
  std::set<KvQuant> formats;
  int rotated = 0;  // affine keys under RoPE (the reference models the rotation's reach)
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario s = generate_scenario(choices, o);
    const Layout& l = s.layout;
    if (!is_affine(l.k_format.quant)) {
      EXPECT_FALSE(is_affine(l.v_format.quant)) << seed;
      continue;
    }
    EXPECT_EQ(l.k_format, l.v_format) << seed;
    EXPECT_EQ(l.head_dim % l.k_format.group, 0) << seed;
    EXPECT_EQ(l.value_dim % l.k_format.group, 0) << seed;
    EXPECT_FALSE(l.value_from_key) << seed;
    rotated += l.rope_theta.has_value();
    groups.insert(l.k_format.group);
    formats.insert(l.k_format.quant);
  }
  EXPECT_EQ(formats.size(), 3u);
  EXPECT_GE(groups.size(), 2u);
  EXPECT_GT(rotated, affine / 4);
  // Every scenario without one is the one an engine that does not declare them gets.
  GeneratorOptions without = o;
  without.supports.kv_affine = false;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Scenario before = generate_scenario(a, without);
    const Scenario after = generate_scenario(b, o);
    if (any_format(after, &is_affine)) continue;
    EXPECT_EQ(before, after) << seed;
  }
  GeneratorOptions forced = o;
  forced.filters.kv_formats = {KvQuant::affine8};
  EXPECT_EQ(count_with(forced,
                       [](const Scenario& s) {
                         return s.layout.k_format.quant == KvQuant::affine8 &&
                                s.layout.v_format.quant == KvQuant::affine8;
                       }),
            kSeeds);
  forced.filters.rope = OnOff::on;  // affine keys under RoPE: no conflict
  EXPECT_FALSE(filter_conflict(forced));
  GeneratorOptions lacking = declaring(true, true);
  lacking.filters.kv_formats = {KvQuant::affine4};
  ASSERT_TRUE(filter_conflict(lacking));
  EXPECT_EQ(filter_conflict(lacking)->message,
            "expected KV formats the engine declares, got affine4 (it does not declare kv_affine)");
}

// Keys quantized by channel (kv_format.h: channel_u8, channel_u4), drawn last for an engine
// that declares kv_channel: about one in four of the scenarios whose K has no other format
// (and no MLA, no model), K only; every other scenario is the one an engine without them
// gets; a truncate never cuts into a whole group; --kv-format forces them.
TEST(GeneratorKvFormats, PerChannelKeysAreDrawnLastAtTheirRate) {
  GeneratorOptions o = declaring(true, true);
  o.supports.kv_affine = true;
  o.supports.kv_channel = true;
  const int channel =
      count_with(o, [](const Scenario& s) { return is_channel(s.layout.k_format.quant); });
  const int eligible = count_with(o, [](const Scenario& s) {
    return (!s.layout.k_format.quantized() || is_channel(s.layout.k_format.quant)) &&
           !s.layout.value_from_key;
  });
  std::printf("per-channel keys in %d of %d eligible scenarios\n", channel, eligible);
  EXPECT_GT(channel, eligible / 4 - 70);  // a few lose theirs to a truncate that cuts a group
  EXPECT_LT(channel, eligible / 4 + 60);
  std::set<int> groups;
  std::set<KvQuant> formats;
  int truncated = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario s = generate_scenario(choices, o);
    EXPECT_FALSE(is_channel(s.layout.v_format.quant)) << seed;
    if (!is_channel(s.layout.k_format.quant)) continue;
    groups.insert(s.layout.k_format.group);
    formats.insert(s.layout.k_format.quant);
    for (const Op& op : s.program) truncated += op.kind == OpKind::truncate;
  }
  EXPECT_EQ(formats.size(), 2u);
  EXPECT_GE(groups.size(), 3u);
  EXPECT_GT(truncated, 0);
  GeneratorOptions without = o;
  without.supports.kv_channel = false;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Scenario before = generate_scenario(a, without);
    const Scenario after = generate_scenario(b, o);
    if (is_channel(after.layout.k_format.quant)) continue;
    EXPECT_EQ(before, after) << seed;
  }
  GeneratorOptions forced = o;
  forced.filters.kv_formats = {KvQuant::channel_u4};
  const int forced_count = count_with(
      forced, [](const Scenario& s) { return s.layout.k_format.quant == KvQuant::channel_u4; });
  std::printf("--kv-format channel_u4: %d of %d\n", forced_count, kSeeds);
  EXPECT_GT(forced_count, kSeeds * 9 / 10);
  GeneratorOptions lacking = declaring(true, true);
  lacking.filters.kv_formats = {KvQuant::channel_u8};
  ASSERT_TRUE(filter_conflict(lacking));
  EXPECT_EQ(filter_conflict(lacking)->message,
            "expected KV formats the engine declares, got channel_u8 (it does not declare "
            "kv_channel)");
}

// vLLM's kv_cache_dtype: an engine that declares kv_one_format gets K and V in one format or
// neither quantized, and one with kv_tensor_scales one fp8 scale per tensor; both narrow
// only what would be outside them (every other scenario is as before), and an fp8 scenario
// of that shape is still drawn at about its rate; unsupported_layout names the others.
TEST(GeneratorKvFormats, OneFormatAndTensorScalesNarrowOnlyTheScenariosOutsideThem) {
  const GeneratorOptions wide = declaring(true, true);
  GeneratorOptions narrow = wide;
  narrow.supports.kv_one_format = true;
  narrow.supports.kv_tensor_scales = true;
  int quantized = 0, changed = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Scenario before = generate_scenario(a, wide);
    const Scenario after = generate_scenario(b, narrow);
    const Layout& l = after.layout;
    EXPECT_EQ(l.k_format.quant, l.v_format.quant) << seed;
    EXPECT_LE(l.k_format.scale.size(), 1u) << seed;
    EXPECT_LE(l.v_format.scale.size(), 1u) << seed;
    EXPECT_FALSE(unsupported_layout(after, narrow.supports)) << seed;
    const Layout& w = before.layout;
    const bool outside = w.k_format.quant != w.v_format.quant || w.k_format.scale.size() > 1 ||
                         w.v_format.scale.size() > 1;
    if (!outside) {
      EXPECT_EQ(before, after) << seed;
    } else {
      ++changed;
      EXPECT_TRUE(unsupported_layout(before, narrow.supports)) << seed;
    }
    quantized += l.quantized_kv();
  }
  std::printf("%d of %d scenarios quantized, %d narrowed\n", quantized, kSeeds, changed);
  EXPECT_GT(changed, 0);
  EXPECT_GT(quantized, kSeeds / 10);
  PrngChoiceSource first(1);
  Scenario mixed = generate_scenario(first, wide);
  mixed.layout.k_format = KvFormat{KvQuant::fp8_e4m3fn, {2.0}};
  mixed.layout.v_format = KvFormat{};
  EXPECT_EQ(unsupported_layout(mixed, narrow.supports),
            "K in fp8_e4m3fn and V in none (the engine stores K and V in one format)");
  mixed.layout.v_format = KvFormat{KvQuant::fp8_e4m3fn, {2.0, 4.0}};
  EXPECT_EQ(unsupported_layout(mixed, narrow.supports),
            "an fp8 scale per kv head (the engine takes one scale per tensor)");
}

}  // namespace
}  // namespace kvfuzz
