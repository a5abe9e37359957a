// A whole model computing in bf16 or f16 (EngineNumerics::activations: a torch model loaded
// in that dtype): its weights rounded, exactly, in the reference too, and every product,
// norm, residual sum, SwiGLU product, attention output and logit rounded to the dtype,
// tolerated as one more rounding noise at each place (model_tolerance.cpp). Tried both
// ways: the built-in cached model computing so passes under its declaration and fails
// without it, and its cache mutants computing so still fail, by margins printed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "forwarding_engine.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/model_engine.h"
#include "model/engines/model_engines.h"
#include "model/model_check.h"

namespace kvfuzz {
namespace {

using model_engines::Arithmetic;
using model_engines::Bug;

// The built-in cached model computing in `activations`, declaring `declared` (a model that
// computes in bf16 but says f32 is the case a missing declaration makes).
class Declaring final : public test::ForwardingModelEngine {
 public:
  Declaring(std::unique_ptr<ModelEngine> inner, DType declared)
      : ForwardingModelEngine(std::move(inner)), declared_(declared) {}
  EngineNumerics numerics() const override {
    EngineNumerics numerics = ForwardingModelEngine::numerics();
    numerics.activations = declared_;
    return numerics;
  }

 private:
  DType declared_;
};

EngineInfo cached_model(DType activations, DType declared, Arithmetic arithmetic = Arithmetic::f32,
                        Bug bug = Bug::none) {
  EngineInfo info;
  info.name = "model-cached in " + std::string(dtype_name(activations));
  info.mutant = bug != Bug::none;
  info.make_model = [=](const ModelEngineConfig& config) -> std::unique_ptr<ModelEngine> {
    return std::make_unique<Declaring>(
        model_engines::make_cached_model(config, arithmetic, bug, activations), declared);
  };
  return info;
}

// A model scenario as `kvfuzz check` makes one for a model whose cache holds `dtype` (a bf16
// model's KV cache is bf16), small (the suite runs under ASan too).
Scenario generated(const EngineInfo& info, uint64_t seed, DType dtype) {
  const EngineDeclarations declared = probe_declarations(info);
  GeneratorOptions o;
  o.model = ModelOptions{};
  o.supports = declared.supports;
  o.supports.dtypes = {dtype};
  // Unquantized caches: a quantized cache's noise would dominate what is measured here.
  o.supports.kv_ggml_blocks = o.supports.kv_affine = false;
  o.truncate = declared.capabilities.truncate;
  o.fork = declared.capabilities.fork;
  o.max_epoch_tokens = 48;
  o.typical_epoch_tokens = 24;
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, o);
}

// Each model over two caches: in its own dtype (a bf16 model's KV cache is bf16) and in
// f32. Undeclared, with f32 layers over an f32 cache (the tightest bound) every scenario
// fails; elsewhere (q, k and v rounded to the cache's dtype, or P to f16, already dominate
// the bound) the undeclared model's error is printed, not asserted: when written, 1 of 8
// failed over its own dtype's cache (median 0.49 to 0.62 of the bound), and the declared
// model passed at most 0.30 of it everywhere.
TEST(ModelActivations, AModelInBf16OrF16PassesUnderItsDeclarationAndFailsWithout) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const Arithmetic arithmetic : {Arithmetic::f32, Arithmetic::p_f16}) {
      for (const DType cache : {dtype, DType::f32}) {
        const EngineInfo honest = cached_model(dtype, dtype, arithmetic);
        const EngineInfo silent = cached_model(dtype, DType::f32, arithmetic);
        double worst = 0;
        std::vector<double> silent_ratios;
        for (uint64_t seed = 1; seed <= 8; ++seed) {
          const Scenario s = generated(honest, seed, cache);
          ASSERT_EQ(s.layout.dtype, cache);
          const ModelVerdict v = judge_model(s, honest);
          ASSERT_TRUE(v.pass) << dtype_name(dtype) << " seed " << seed << ": "
                              << describe_model_divergence(v);
          worst = std::max(worst, v.worst_logits_ratio);
          silent_ratios.push_back(judge_model(s, silent).worst_logits_ratio);
        }
        std::sort(silent_ratios.begin(), silent_ratios.end());
        const auto failed = std::count_if(silent_ratios.begin(), silent_ratios.end(),
                                          [](double r) { return r > 1; });
        std::printf(
            "activations %s, cache %s (%s layers): 8 model scenarios pass at most %.3f of the "
            "logits bound; declared f32 instead, %ld of 8 fail, logits error/bound least %.3g, "
            "median %.3g\n",
            std::string(dtype_name(dtype)).c_str(), std::string(dtype_name(cache)).c_str(),
            arithmetic == Arithmetic::f32 ? "f32" : "P f16", worst, static_cast<long>(failed),
            silent_ratios[0], silent_ratios[4]);
        EXPECT_LT(worst, 0.7) << dtype_name(dtype);
        if (cache == DType::f32 && arithmetic == Arithmetic::f32) {
          EXPECT_EQ(failed, 8) << dtype_name(dtype);
        }
      }
    }
  }
}

// A cache bug in a model computing in bf16 still fails where it fails in f32: the
// activations' noise widens the bound, not past what a cache bug does. (Most generated
// scenarios' truncate or fork does not reach the bug: keep at the length, a fork into an
// identical sequence; those pass in both.)
TEST(ModelActivations, CacheBugsFailInBf16WhereTheyFailInF32) {
  for (const Bug bug : {Bug::truncate_keeps_one, Bug::fork_from_self}) {
    const char* name =
        bug == Bug::truncate_keeps_one ? "model-truncate-keeps-one" : "model-fork-ignored";
    int scenarios = 0, rejected_f32 = 0, rejected_bf16 = 0;
    std::vector<double> ratios;
    for (uint64_t seed = 1; seed <= 60 && rejected_f32 < 6; ++seed) {
      const Scenario s = generated(cached_model(DType::bf16, DType::bf16), seed, DType::bf16);
      ++scenarios;
      const ModelVerdict f32 =
          judge_model(s, cached_model(DType::f32, DType::f32, Arithmetic::f32, bug));
      const ModelVerdict bf16 =
          judge_model(s, cached_model(DType::bf16, DType::bf16, Arithmetic::f32, bug));
      if (f32.pass) continue;
      ++rejected_f32;
      rejected_bf16 += bf16.pass ? 0 : 1;
      ratios.push_back(bf16.worst_logits_ratio);
      EXPECT_FALSE(bf16.pass) << name << " seed " << seed;
    }
    ASSERT_GE(rejected_f32, 4) << name;
    std::sort(ratios.begin(), ratios.end());
    std::printf(
        "%s: rejected in f32 on %d of %d bf16-cache model scenarios, in bf16 on %d of those; "
        "logits error/bound in bf16 least %.3g, median %.3g\n",
        name, rejected_f32, scenarios, rejected_bf16, ratios.front(), ratios[ratios.size() / 2]);
  }
}

}  // namespace
}  // namespace kvfuzz
