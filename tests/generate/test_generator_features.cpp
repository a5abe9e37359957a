// The attention features (generate/features.h): drawn only for an engine that declares
// them, each in about one scenario in six (a featured third, then a fair coin each), every
// scenario valid and inside the supports; an engine that declares none gets the scenarios
// it got before features existed, choice for choice; --feature forces one on and is named
// when the engine lacks it.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>

#include "generate/count_scenarios.h"
#include "generate/features.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {
namespace {

using test::count_with;
using test::kSeeds;

GeneratorOptions with_features() {
  GeneratorOptions o;
  for (bool EngineSupports::*feature : kFeatureSupports) o.supports.*feature = true;
  return o;
}

TEST(GeneratorFeatures, EachDeclaredFeatureAtItsStatedRate) {
  const GeneratorOptions o = with_features();
  // 1/3 * 1/2 = 1/6 each: 200 of 1200 expected; binomial sd ~13, so 150..250 is ~4 sd.
  const std::pair<const char*, std::function<bool(const Scenario&)>> features[] = {
      {"softcap", [](const Scenario& s) { return s.layout.softcap.has_value(); }},
      {"sinks", [](const Scenario& s) { return !s.layout.sinks.empty(); }},
      {"alibi", [](const Scenario& s) { return !s.layout.alibi.empty(); }},
      {"chunked_local", [](const Scenario& s) { return s.layout.chunked_local.has_value(); }},
  };
  for (const auto& [name, has] : features) {
    const int n = count_with(o, has);
    std::printf("%-14s %d of %d scenarios\n", name, n, kSeeds);
    EXPECT_GT(n, 150) << name;
    EXPECT_LT(n, 250) << name;
  }
  // Combined: some scenarios have two or more.
  EXPECT_GT(
      count_with(o, [](const Scenario& s) { return s.layout.softcap && !s.layout.sinks.empty(); }),
      0);
}

TEST(GeneratorFeatures, AnEngineWithoutThemGetsTheSameScenariosAsBefore) {
  GeneratorOptions plain;
  EXPECT_EQ(count_with(plain, [](const Scenario& s) { return s.layout.has_features(); }), 0);
  // Declaring one feature changes only what features draw: the layout aside, the same case.
  GeneratorOptions one;
  one.supports.sinks = true;
  int same = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Scenario before = generate_scenario(a, plain);
    Scenario after = generate_scenario(b, one);
    EXPECT_TRUE(after.layout.softcap == std::nullopt && after.layout.alibi.empty() &&
                !after.layout.chunked_local)
        << seed;
    // What pick_layout draws before the features is the same; later draws (the program,
    // score spreads that set a scale, windows at edges) follow the extra choices.
    const Layout& x = before.layout;
    const Layout& y = after.layout;
    same += x.q_heads == y.q_heads && x.kv_heads == y.kv_heads && x.head_dim == y.head_dim &&
                    x.value_dim == y.value_dim && x.page_size == y.page_size &&
                    x.dtype == y.dtype && x.rope_theta == y.rope_theta
                ? 1
                : 0;
  }
  EXPECT_EQ(same, 200);
  // And written as format version 1 when it has no feature.
  PrngChoiceSource c(1);
  EXPECT_EQ(fixture_format_version(generate_scenario(c, plain)), 1);
}

TEST(GeneratorFeatures, TheFilterForcesAFeatureAndIsNamedWhenTheEngineLacksIt) {
  GeneratorOptions o = with_features();
  o.filters.features.chunked_local = true;
  EXPECT_EQ(count_with(o, [](const Scenario& s) { return s.layout.chunked_local.has_value(); }),
            kSeeds);
  GeneratorOptions lacking;
  lacking.filters.features.alibi = true;
  const auto conflict = filter_conflict(lacking);
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->filter, FilterConflict::Filter::features);
  EXPECT_EQ(conflict->message,
            "expected features the engine declares, got alibi (not in its supports)");
  PrngChoiceSource choices(1);
  EXPECT_THROW(generate_scenario(choices, lacking), std::invalid_argument);
  GeneratorOptions model = with_features();
  model.model = ModelOptions{};
  EXPECT_EQ(count_with(model, [](const Scenario& s) { return s.layout.has_features(); }), 0);
}

// MLA's value read from its key (generate/features.h, pick_value_from_key): drawn last, in
// about one in four of the scenarios (with RoPE, a head of 4 or more: its part, rope_dims,
// declared here too), over an unquantized, fp8 or ggml block key cache, never with a V
// format (the value is read from the key's cache), with value_dim below head_dim where
// head_dim allows it and whole blocks of a block format's row; every other choice as
// without it; the filter forces it (over --kv-format's formats) and conflicts with an
// affine --kv-format, and with --rope on where rope_dims is not declared.
TEST(GeneratorFeatures, ValueFromKeyIsDrawnLastAtItsRateAndTheFilterForcesIt) {
  const GeneratorOptions o = with_features();
  // Drawn one in four, skipped only where RoPE leaves no room (a head below 4): over an
  // unquantized, fp8 or block key cache (the affine formats, drawn after it, never are).
  const int drawn = count_with(o, [](const Scenario& s) { return s.layout.value_from_key; });
  std::printf("value_from_key %d of %d scenarios\n", drawn, kSeeds);
  int over_fp8 = 0, over_blocks = 0;  // MLA over an fp8 or a ggml block key cache
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kSeeds); ++seed) {
    PrngChoiceSource choices(seed);
    const Layout l = generate_scenario(choices, o).layout;
    if (!l.value_from_key) continue;
    EXPECT_FALSE(l.v_format.quantized() || is_affine(l.k_format.quant)) << seed;
    over_fp8 += is_fp8(l.k_format.quant);
    over_blocks += is_ggml_block(l.k_format.quant);
    EXPECT_EQ(l.value_dim % row_multiple(l.k_format), 0) << seed;
  }
  std::printf("value_from_key over an fp8 key cache: %d, ggml blocks: %d\n", over_fp8, over_blocks);
  EXPECT_GT(over_fp8, drawn / 20);
  EXPECT_GT(over_blocks, drawn / 20);
  EXPECT_GT(drawn, kSeeds / 4 - 60);
  EXPECT_LT(drawn, kSeeds / 4 + 60);
  EXPECT_GT(count_with(o,
                       [](const Scenario& s) {
                         return s.layout.value_from_key && s.layout.value_dim < s.layout.head_dim;
                       }),
            drawn / 2);
  // Without it declared, the scenarios are the others' choice for choice: only the layout of
  // the drawn ones differs (the affine formats, drawn after it, are left out of both).
  GeneratorOptions with = o;
  with.supports.kv_affine = false;
  with.supports.rope_interleaved = false;  // drawn after it too
  with.supports.rope_dims = false;         // drawn in it (MLA's part) and after it
  GeneratorOptions without = with;
  without.supports.value_from_key = false;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    Scenario before = generate_scenario(a, without);
    Scenario after = generate_scenario(b, with);
    if (after.layout.value_from_key) continue;
    EXPECT_EQ(before, after) << seed;
  }
  GeneratorOptions forced = o;
  forced.filters.features.value_from_key = true;
  EXPECT_EQ(count_with(forced, [](const Scenario& s) { return s.layout.value_from_key; }), kSeeds);
  GeneratorOptions over_fp8_forced = forced;
  over_fp8_forced.filters.kv_formats = {KvQuant::fp8_e5m2};
  EXPECT_EQ(count_with(over_fp8_forced,
                       [](const Scenario& s) {
                         return s.layout.value_from_key &&
                                s.layout.k_format.quant == KvQuant::fp8_e5m2 &&
                                !s.layout.v_format.quantized();
                       }),
            kSeeds);
  GeneratorOptions over_blocks_forced = forced;  // llama.cpp's DeepSeek with -ctk q4_0
  over_blocks_forced.filters.kv_formats = {KvQuant::q4_0};
  EXPECT_EQ(count_with(over_blocks_forced,
                       [](const Scenario& s) {
                         return s.layout.value_from_key &&
                                s.layout.k_format.quant == KvQuant::q4_0 &&
                                !s.layout.v_format.quantized() && s.layout.value_dim % 32 == 0;
                       }),
            kSeeds);
  // With RoPE forced too, a head of one block is widened to two (DeepSeek's latent blocks,
  // then the RoPE part's), where the page pool drawn for it allows.
  over_blocks_forced.filters.rope = OnOff::on;
  const int with_part = count_with(over_blocks_forced, [](const Scenario& s) {
    const Layout& l = s.layout;
    return l.rope_dims && l.head_dim >= 2 * kGgmlBlock && l.value_dim % kGgmlBlock == 0 &&
           l.value_dim <= l.head_dim - *l.rope_dims;
  });
  std::printf("MLA over q4_0 with RoPE forced: %d of %d with its part\n", with_part, kSeeds);
  EXPECT_GT(with_part, kSeeds * 9 / 10);
  over_fp8_forced.filters.kv_formats = {KvQuant::fp8_e5m2, KvQuant::affine8};
  ASSERT_TRUE(filter_conflict(over_fp8_forced));
  EXPECT_EQ(filter_conflict(over_fp8_forced)->message,
            "expected no affine KV format with value_from_key (the generator draws a latent "
            "cache in fp8 or ggml's blocks, not in affine groups), got --kv-format with one");
  forced.filters.rope = OnOff::on;
  EXPECT_FALSE(filter_conflict(forced));  // MLA's RoPE part, rope_dims, is declared
  forced.supports.rope_dims = false;
  ASSERT_TRUE(filter_conflict(forced));
  EXPECT_EQ(filter_conflict(forced)->message,
            "expected no RoPE with value_from_key (MLA's RoPE turns a part of the key, "
            "rope_dims, which the engine does not declare), got RoPE on");
}

// RoPE's interleaved pairs: drawn last, in about one RoPE scenario in three, only for an
// engine that declares them; the others' scenarios stay choice for choice; the filter forces
// RoPE on in interleaved pairs and refuses --rope off beside it.
TEST(GeneratorFeatures, RopeInterleavedIsDrawnLastAtItsRateAndTheFilterForcesIt) {
  GeneratorOptions o = with_features();
  o.supports.rope_dims = false;  // drawn after it: its draws would follow other choices
  const int eligible =
      count_with(o, [](const Scenario& s) { return s.layout.rope_theta.has_value(); });
  const int drawn = count_with(
      o, [](const Scenario& s) { return s.layout.rope_style == RopeStyle::interleaved; });
  std::printf("rope_interleaved %d of %d scenarios with RoPE\n", drawn, eligible);
  // Binomial(eligible, 1/3): sd about 10 at 400; 40 is four of them.
  EXPECT_GT(drawn, eligible / kRopeInterleavedCaseOdds - 40);
  EXPECT_LT(drawn, eligible / kRopeInterleavedCaseOdds + 40);
  GeneratorOptions without = o;
  without.supports.rope_interleaved = false;
  EXPECT_EQ(
      count_with(without,
                 [](const Scenario& s) { return s.layout.rope_style != RopeStyle::half_split; }),
      0);
  // Without it declared, the scenarios are the others' choice for choice, but for the drawn
  // ones' pairs and (generated tokens) their score spread, sized again for them.
  int same = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    const Scenario before = generate_scenario(a, without);
    const Scenario after = generate_scenario(b, o);
    if (after.layout.rope_style == RopeStyle::interleaved) continue;
    EXPECT_EQ(before, after) << seed;
    ++same;
  }
  EXPECT_GT(same, 150);
  GeneratorOptions forced = o;
  forced.filters.features.rope_interleaved = true;
  EXPECT_EQ(count_with(forced,
                       [](const Scenario& s) {
                         return s.layout.rope_theta &&
                                s.layout.rope_style == RopeStyle::interleaved;
                       }),
            kSeeds);
  forced.filters.rope = OnOff::off;
  ASSERT_TRUE(filter_conflict(forced));
  EXPECT_EQ(filter_conflict(forced)->message,
            "expected RoPE with rope_interleaved (it says which pairs RoPE turns), got --rope "
            "off");
}

// RoPE on part of the head: one scenario with RoPE (and a head of 4 or more) in
// kRopeDimsCaseOdds outside MLA, and every MLA scenario with RoPE (MLA's decoupled RoPE part,
// its value before the part); none for an engine that does not declare it.
TEST(GeneratorFeatures, RopeDimsIsDrawnLastAtItsRateMlaCarriesItAndTheFilterForcesIt) {
  const GeneratorOptions o = with_features();
  const auto plain_eligible = [](const Scenario& s) {
    return s.layout.rope_theta && s.layout.head_dim >= 4 && !s.layout.value_from_key;
  };
  const int eligible = count_with(o, plain_eligible);
  const int drawn = count_with(
      o, [&](const Scenario& s) { return plain_eligible(s) && s.layout.rope_dims.has_value(); });
  std::printf("rope_dims %d of %d scenarios with RoPE (head_dim >= 4, not MLA)\n", drawn, eligible);
  // Binomial(eligible, 1/4): sd about 9 at 400; 40 is four and more of them.
  EXPECT_GT(drawn, eligible / kRopeDimsCaseOdds - 40);
  EXPECT_LT(drawn, eligible / kRopeDimsCaseOdds + 40);
  // MLA with RoPE: always a part, the value within what it leaves; some MLA scenarios have it.
  int mla_rope = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource c(seed);
    const Scenario s = generate_scenario(c, o);
    if (s.layout.rope_dims) {
      EXPECT_EQ(*s.layout.rope_dims % 2, 0) << seed;
      EXPECT_LT(*s.layout.rope_dims, s.layout.head_dim) << seed;
    }
    if (!s.layout.value_from_key || !s.layout.rope_theta) continue;
    ++mla_rope;
    ASSERT_TRUE(s.layout.rope_dims) << seed;
    EXPECT_LE(s.layout.value_dim, s.layout.head_dim - *s.layout.rope_dims) << seed;
  }
  std::printf("MLA scenarios with RoPE (and its part): %d\n", mla_rope);
  EXPECT_GT(mla_rope, 20);
  GeneratorOptions without = o;
  without.supports.rope_dims = false;
  EXPECT_EQ(count_with(without, [](const Scenario& s) { return s.layout.rope_dims.has_value(); }),
            0);
  EXPECT_EQ(count_with(without,
                       [](const Scenario& s) {
                         return s.layout.value_from_key && s.layout.rope_theta.has_value();
                       }),
            0);
  GeneratorOptions forced = o;
  forced.filters.features.rope_dims = true;
  EXPECT_EQ(count_with(forced,
                       [](const Scenario& s) {
                         return s.layout.rope_theta && s.layout.rope_dims.has_value();
                       }),
            kSeeds);
  // MLA forced with RoPE forced: every scenario has the part.
  GeneratorOptions mla = o;
  mla.filters.features.value_from_key = true;
  mla.filters.rope = OnOff::on;
  ASSERT_FALSE(filter_conflict(mla));
  EXPECT_EQ(count_with(mla,
                       [](const Scenario& s) {
                         return s.layout.value_from_key && s.layout.rope_dims.has_value();
                       }),
            kSeeds);
  forced.filters.rope = OnOff::off;
  ASSERT_TRUE(filter_conflict(forced));
  EXPECT_EQ(filter_conflict(forced)->message,
            "expected RoPE with rope_dims (it says which elements RoPE turns), got --rope off");
  mla.supports.rope_dims = false;
  ASSERT_TRUE(filter_conflict(mla));
  EXPECT_EQ(filter_conflict(mla)->message,
            "expected no RoPE with value_from_key (MLA's RoPE turns a part of the key, "
            "rope_dims, which the engine does not declare), got RoPE on");
}

}  // namespace
}  // namespace kvfuzz
