// The quantized KV formats (generate/kv_formats.h): drawn only for an engine that declares
// kv_fp8 or kv_ggml_blocks, in about one scenario in four, every scenario valid and inside
// the supports (rows of 32 for a block format, no block-quantized keys under RoPE, fp8
// scales powers of two); an engine that declares neither gets no format and the same layout
// as before; --kv-format forces its formats on and is named when the engine lacks one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>

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
  int scaled = 0, unquantized_v = 0, mixed = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource choices(seed);
    const Layout l = generate_scenario(choices, o).layout;
    EXPECT_FALSE(is_ggml_block(l.k_format.quant) && l.rope_theta) << seed;
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
  GeneratorOptions model = declaring(true, true);
  model.model = ModelOptions{};
  EXPECT_EQ(count_with(model, [](const Scenario& s) { return s.layout.quantized_kv(); }), 0);
}

}  // namespace
}  // namespace kvfuzz
