// The low-precision honest engines (numerics_profiles.h) against generated scenarios, both
// ways: an honest engine with each profile stays within the declared-numerics bound (its
// worst error / accepted error ratio is printed), and every mutant rebuilt on each profile
// is still rejected, a value mismatch by at least 10x its bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "cpu/numerics_profiles.h"
#include "forwarding_engine.h"
#include "judge/tolerance.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/prng.h"
#include "run/runner.h"

namespace kvfuzz {
namespace {

// `engine` computing with `profile` (its name says both).
EngineInfo on_profile(const EngineInfo& engine, const cpu::NumericsProfile& profile) {
  EngineInfo rebuilt = engine;
  rebuilt.name = engine.name + "@" + std::string(profile.name);
  rebuilt.make = [&engine, &profile](const EngineConfig& config) {
    return cpu::with_numerics(engine.make(config), profile);
  };
  return rebuilt;
}

GeneratorOptions options_for(const EngineInfo& engine, const cpu::NumericsProfile& profile) {
  GeneratorOptions options;
  const EngineCapabilities can = probe_capabilities(engine);
  options.truncate = can.truncate;
  options.fork = can.fork;
  options.supports = profile.supports;
  return options;
}

// The largest share of the arithmetic bound an honest run uses: (|got - expected| minus
// the output rounding's half ulp, which is modelled exactly) / bound, over every value.
double worst_ratio(const Scenario& scenario, const Prepared& prepared, const EngineRun& run) {
  double worst = 0;
  const auto vd = static_cast<size_t>(scenario.layout.value_dim);
  for (const EngineRow& row : run.rows) {
    const ReferenceRow& ref = prepared.reference.at(row.key);
    for (size_t i = 0; i < row.values.size(); ++i) {
      const double bound = ref.bound[i / vd];
      const double rounding =
          accepted_error(bound, ref.values[i], prepared.numerics.output) - bound;
      const double error = std::fabs(row.values[i] - ref.values[i]) - rounding;
      if (bound > 0) worst = std::max(worst, error / bound);
    }
  }
  return worst;
}

TEST(NumericsBases, HonestEnginesWithEachProfileStayWithinTheDeclaredBound) {
  for (const cpu::NumericsProfile& profile : cpu::numerics_profiles()) {
    for (const char* base : {"contiguous", "paged", "flash"}) {
      const EngineInfo engine = on_profile(*find_engine(base), profile);
      const GeneratorOptions options = options_for(engine, profile);
      double worst = 0;
      for (int i = 0; i < 150; ++i) {
        PrngChoiceSource choices(case_seed(31, i));
        const Scenario scenario = generate_scenario(choices, options);
        ASSERT_EQ(unsupported_layout(scenario, profile.supports), std::nullopt);
        const std::unique_ptr<Engine> instance = engine.make(engine_config(scenario));
        const Prepared prepared = prepare(scenario, instance->numerics());
        const EngineRun run = run_engine(scenario, prepared.table, *instance);
        ASSERT_FALSE(run.error) << engine.name << ", case " << i << ": " << *run.error;
        worst = std::max(worst, worst_ratio(scenario, prepared, run));
        const CheckOutcome outcome = judge_engine(scenario, prepared, engine);
        ASSERT_TRUE(outcome.verdict.pass) << engine.name << ", case " << i;
      }
      std::printf("%-28s worst (error - rounding) / bound over 150 cases: %.3f\n",
                  engine.name.c_str(), worst);
      EXPECT_LE(worst, 1.0);
    }
  }
}

// An engine computing as before but declaring less (`take_back` resets what it declares
// beyond the plain forms): what an honest engine had to say before it could declare itself.
class Undeclared final : public test::ForwardingEngine {
 public:
  Undeclared(std::unique_ptr<Engine> inner, void (*take_back)(EngineNumerics&))
      : ForwardingEngine(std::move(inner)), take_back_(take_back) {}
  EngineNumerics numerics() const override {
    EngineNumerics n = ForwardingEngine::numerics();
    take_back_(n);
    return n;
  }

 private:
  void (*take_back_)(EngineNumerics&);
};

void plain_combine(EngineNumerics& n) {
  n.split_combine_lse = false;
  n.split_partials = DType::f32;
}
void plain_p(EngineNumerics& n) {
  n.p_normalised = false;
}
void plain_rope(EngineNumerics& n) {
  n.rope_tables = DType::f32;
  n.rotated_queries_in_storage = false;
}

// Both ways for the new forms: the log-sum-exp combine on the flash engine whose decodes
// split into 4 (FlashAttention-2's num_splits), P normalised before rounding on the paged
// engine, RoPE computed in bf16 from bf16 tables on the flash engine. Declared, every generated
// case passes; undeclared, the same arithmetic fails a generated case, as FlashAttention-2's,
// FlashInfer's and vLLM's kernels did before steps 10 and 11 of tolerance.cpp. (Not bf16-lse: over
// 600 cases its combine's error stays inside bf16's own noise, P's rounding and half a bf16 ulp of
// output.)
TEST(NumericsBases, TheNewFormsPassDeclaredAndFailAGeneratedCaseUndeclared) {
  struct Case {
    const char* profile;
    const char* base;
    void (*take_back)(EngineNumerics&);
  };
  for (const Case& c :
       {Case{"f32-lse", "flash-fixed-split", plain_combine},
        Case{"f16-merge", "flash-fixed-split", plain_combine},
        Case{"f16-normalised", "paged", plain_p}, Case{"bf16-rope-tables", "flash", plain_rope}}) {
    const cpu::NumericsProfile& profile = cpu::numerics_profile(c.profile);
    const EngineInfo engine = on_profile(*find_engine(c.base), profile);
    EngineInfo undeclared = engine;
    undeclared.make = [&engine, &c](const EngineConfig& config) -> std::unique_ptr<Engine> {
      return std::make_unique<Undeclared>(engine.make(config), c.take_back);
    };
    const GeneratorOptions options = options_for(engine, profile);
    int first_miss = -1;
    for (int i = 0; i < 600 && first_miss < 0; ++i) {
      PrngChoiceSource choices(case_seed(43, i));
      const Scenario scenario = generate_scenario(choices, options);
      ASSERT_TRUE(judge_engine(scenario, prepare(scenario), engine).verdict.pass)
          << engine.name << ", case " << i;
      const CheckOutcome outcome = judge_engine(scenario, prepare(scenario), undeclared);
      if (outcome.verdict.pass) continue;
      first_miss = i;
      const Divergence& d = *outcome.verdict.first;
      EXPECT_EQ(d.kind, FailureKind::mismatch) << engine.name << ", case " << i;
      std::printf("%-28s undeclared fails case %d: error %.6g, bound %.6g\n", engine.name.c_str(),
                  i, d.error, d.bound);
    }
    EXPECT_GE(first_miss, 0) << engine.name << " undeclared passed 600 generated cases";
  }
}

TEST(NumericsBases, EveryMutantOnEachProfileIsRejectedByAMarginOfTenOrMore) {
  for (const cpu::NumericsProfile& profile : cpu::numerics_profiles()) {
    for (const EngineInfo& mutant : engine_registry()) {
      // The CUDA mutants run the CUDA kernels, whose numerics are their own options (f32,
      // or bf16 P and rows), not these CPU profiles: tests/cuda/test_cuda_engines.cpp
      // states their margins.
      if (!mutant.mutant || mutant.name.starts_with("cuda-")) continue;
      const EngineInfo engine = on_profile(mutant, profile);
      GeneratorOptions options = options_for(engine, profile);
      // The attention features' mutants need theirs drawn (the others keep the stream they
      // were measured on, without features).
      static const std::set<std::string> kFeatureMutants = {
          "softcap-twice-split",        "sink-prefill-only",    "alibi-kv-head-slope",
          "chunked-local-from-request", "fp8-v-scale-dropped",  "q4_0-nibbles-swapped",
          "affine-pack-high-first",     "mla-value-at-key-end", "rope-interleaved-as-half-split",
          "rope-part-at-front"};
      if (kFeatureMutants.count(mutant.name) != 0) {
        for (bool EngineSupports::*feature : kFeatureSupports) options.supports.*feature = true;
      }
      bool rejected = false;
      // A feature mutant's effect depends on its case (a chunk edge that drops one key of
      // several alike, a sink beside a large score): its best margin over its first six
      // rejections (in 400 cases) is asserted, each printed. Measured (best of six, the least
      // profile): sink-prefill-only 512 (f16acc), chunked-local-from-request 66 (f16acc),
      // alibi-kv-head-slope 4.5 (f16acc; 13 on bf16), softcap-twice-split 1.8 (f16acc; 29
      // on f16, 9.3 on bf16): capping twice moves a logit by at most (1 - tanh 1) cap, and
      // by far less where the cap lies above the scores, against f16 value sums' noise.
      const bool feature_mutant = kFeatureMutants.count(mutant.name) != 0;
      int rejections = 0;
      double best = 0;
      for (int i = 0; i < 400 && !rejected; ++i) {
        PrngChoiceSource choices(case_seed(7, i));
        const Scenario scenario = generate_scenario(choices, options);
        const Prepared prepared = prepare(scenario, profile.numerics);
        const CheckOutcome outcome = judge_engine(scenario, prepared, engine);
        if (outcome.verdict.pass) continue;
        if (feature_mutant) {
          const Divergence& d = *outcome.verdict.first;
          const double ratio = d.kind == FailureKind::mismatch ? d.error / d.bound : HUGE_VAL;
          best = std::max(best, ratio);
          std::printf("%-36s rejected at case %d: error / bound = %g\n", engine.name.c_str(), i,
                      ratio);
          rejected = ++rejections == 6;
          continue;
        }
        rejected = true;
        const Divergence& d = *outcome.verdict.first;
        std::string margin = "no value compared (" + std::string(failure_kind_name(d.kind)) + ")";
        if (d.kind == FailureKind::mismatch) {
          margin = "error / bound = " + std::to_string(d.error / d.bound);
          // window-evicts-early drops one key of a window: on f16acc its first rejection
          // (case 7) has been 8.98 bounds off. RoPE computed in bf16 from bf16 tables costs
          // 9 u_bf16 S of every logit (tolerance.cpp, step 1), a worst case: there
          // reset-keeps-block-table's first rejection (case 2) is 1.56 bounds off.
          double least_margin = mutant.name == "window-evicts-early" ? 8 : 10;
          if (profile.name == "bf16-rope-tables" && mutant.name == "reset-keeps-block-table") {
            least_margin = 1.5;
          }
          EXPECT_GE(d.error, least_margin * d.bound) << engine.name << ", case " << i;
        }
        std::printf("%-36s rejected at case %d: %s\n", engine.name.c_str(), i, margin.c_str());
      }
      if (feature_mutant && rejections > 0) {
        rejected = true;
        const double floor = mutant.name == "softcap-twice-split"   ? 1.5
                             : mutant.name == "alibi-kv-head-slope" ? 4
                                                                    : 10;
        EXPECT_GE(best, floor) << engine.name;
      }
      EXPECT_TRUE(rejected) << engine.name << " passed 400 generated cases";
    }
  }
}

}  // namespace
}  // namespace kvfuzz
