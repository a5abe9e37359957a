// The model level's KV caches in ggml's blocks (llama.cpp's --cache-type-k and -v;
// model_tolerance.cpp): the largest error the noise gives each stored element covers
// every element ggml's quantizers store, and is not vacuous; honest engines pass model
// scenarios in every block format, while a cache that reads its blocks wrong fails at the
// logits by a margin printed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "forwarding_engine.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/kv_format.h"
#include "kvfuzz/prng.h"
#include "model/model_check.h"
#include "model/reference_forward.h"

namespace kvfuzz {
namespace {

using test::engine;

constexpr std::array<KvQuant, 5> kBlocks{KvQuant::q8_0, KvQuant::q4_0, KvQuant::q4_1, KvQuant::q5_0,
                                         KvQuant::q5_1};

// Blocks of 32 in the shapes a quantizer's edges care about: uniform of either sign, one
// sign only, the extremes of opposite signs (q4_0's and q5_0's clamped element), tiny and
// large magnitudes, and a constant block.
std::vector<std::array<float, kGgmlBlock>> sample_blocks() {
  std::vector<std::array<float, kGgmlBlock>> blocks;
  uint64_t state = 20261207;
  const auto uniform = [&] { return uniform_from_bits(splitmix64(state)); };  // [-1, 1)
  for (int b = 0; b < 4000; ++b) {
    std::array<float, kGgmlBlock> x{};
    const int shape = b % 6;
    const double magnitude = shape == 3 ? 1e-3 : shape == 4 ? 1e3 : 1 + 4 * std::fabs(uniform());
    for (float& e : x) {
      const double u = uniform();
      e = static_cast<float>(magnitude * (shape == 1 ? std::fabs(u) : u));
    }
    if (shape == 2) {
      x[0] = static_cast<float>(-magnitude);
      x[1] = static_cast<float>(magnitude);
    }
    if (shape == 5) x.fill(static_cast<float>(0.75 * magnitude));
    blocks.push_back(x);
  }
  return blocks;
}

TEST(ModelKvBlocks, TheBlockErrorCoversEveryElementGgmlStores) {
  const auto blocks = sample_blocks();
  for (const KvQuant quant : kBlocks) {
    const KvFormat format{quant, {}};
    double worst = 0;  // the largest |stored - x| / bound seen
    for (const auto& x : blocks) {
      std::array<float, kGgmlBlock> stored{};
      round_trip_row(format, DType::f32, 0, x.data(), kGgmlBlock, stored.data());
      std::array<double, kGgmlBlock> wide{};
      std::copy(x.begin(), x.end(), wide.begin());
      std::array<double, kGgmlBlock> bound{};
      model::ggml_block_errors(quant, wide.data(), kGgmlBlock, bound.data());
      for (int i = 0; i < kGgmlBlock; ++i) {
        const double error = std::fabs(double(stored[i]) - double(x[i]));
        ASSERT_LE(error, bound[i]) << kv_quant_name(quant) << " element " << i << " of " << x[i];
        worst = std::max(worst, error / bound[i]);
      }
    }
    std::printf("%s: the largest stored error is %.3f of the modelled one\n",
                std::string(kv_quant_name(quant)).c_str(), worst);
    // Not vacuous: the quantizer reaches most of it (half a step against half a step and
    // 2^-10; the clamped elements' own).
    EXPECT_GT(worst, 0.7) << kv_quant_name(quant);
  }
  // The query's q8_0 blocks (q8_1's sum aside), against the same quantizer.
  double worst = 0;
  for (const auto& x : blocks) {
    std::array<float, kGgmlBlock> stored{};
    round_trip_row(KvFormat{KvQuant::q8_0, {}}, DType::f32, 0, x.data(), kGgmlBlock, stored.data());
    std::array<double, kGgmlBlock> wide{};
    std::copy(x.begin(), x.end(), wide.begin());
    std::array<double, kGgmlBlock> bound{};
    model::query_block_errors(wide.data(), kGgmlBlock, bound.data());
    for (int i = 0; i < kGgmlBlock; ++i) {
      const double error = std::fabs(double(stored[i]) - double(x[i]));
      ASSERT_LE(error, bound[i]) << "query element " << i;
      worst = std::max(worst, error / bound[i]);
    }
  }
  std::printf("query q8_0: %.3f of the modelled error\n", worst);
  EXPECT_GT(worst, 0.5);
}

// Model scenarios as `kvfuzz check --kv-format ...` makes them, small (the suite runs
// under ASan too).
Scenario generated(const EngineInfo& info, uint64_t seed, std::vector<KvQuant> formats) {
  const EngineDeclarations declared = probe_declarations(info);
  GeneratorOptions o;
  o.model = ModelOptions{};
  o.supports = declared.supports;
  o.supports.kv_ggml_blocks = true;  // an attention engine at model level declares it too
  o.filters.kv_formats = std::move(formats);
  o.truncate = declared.capabilities.truncate;
  o.fork = declared.capabilities.fork;
  o.max_epoch_tokens = 48;
  o.typical_epoch_tokens = 24;
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, o);
}

TEST(ModelKvBlocks, HonestEnginesPassEveryFormatAndAWrongBlockReadFails) {
  const std::vector<KvQuant> all(kBlocks.begin(), kBlocks.end());
  // Whole-model engines (each layer a CPU engine storing the blocks) and an attention
  // engine in every layer.
  for (const char* name : {"model-cached", "model-cached-f16", "model-cached-f16acc", "flash"}) {
    double worst = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      const Scenario s = generated(engine(name), seed, all);
      ASSERT_TRUE(is_ggml_block(s.layout.k_format.quant)) << seed;
      const ModelVerdict v = judge_model(s, engine(name));
      ASSERT_TRUE(v.pass) << name << " seed " << seed << ": " << describe_model_divergence(v);
      worst = std::max(worst, v.worst_logits_ratio);
    }
    std::printf("%s: 12 quantized model scenarios pass, at most %.3f of the logits bound\n", name,
                worst);
  }
  // q4_0 blocks unpacked with the nibbles swapped (elements j and j + 16 trade places): a
  // cache bug of the kind the issue names ("quantized blocks read with the wrong layout"),
  // under q4_0's noise, the widest of the formats.
  const EngineInfo& mutant = engine("q4_0-nibbles-swapped");
  int tried = 0;
  std::vector<double> ratios;  // the mutant's largest logits error / bound, per scenario
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const Scenario s = generated(mutant, seed, {KvQuant::q4_0});
    ASSERT_TRUE(judge_model(s, engine("flash")).pass) << seed;
    const ModelVerdict v = judge_model(s, mutant);
    ++tried;
    ratios.push_back(v.worst_logits_ratio);
    EXPECT_EQ(v.pass, v.worst_logits_ratio <= 1) << seed;
  }
  std::sort(ratios.begin(), ratios.end());
  const auto rejected = std::count_if(ratios.begin(), ratios.end(), [](double r) { return r > 1; });
  std::printf(
      "q4_0-nibbles-swapped: rejected on %ld of %d q4_0 model scenarios; logits "
      "error/bound least %.3g, median %.3g, largest %.3g\n",
      static_cast<long>(rejected), tried, ratios.front(), ratios[ratios.size() / 2], ratios.back());
  EXPECT_GE(rejected, tried * 3 / 4);
  // q4_0 is the widest noise of the formats: the margin is thin (median 1.74 on these 12;
  // honest engines above reach 0.25 of the bound).
  EXPECT_GT(ratios[ratios.size() / 2], 1.5);
}

}  // namespace
}  // namespace kvfuzz
