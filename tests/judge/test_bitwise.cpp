// Bitwise claims (Engine::bitwise_claims): a claimed invariance is judged with exact
// equality. Both ways: the built-in engines' claims hold on generated scenarios; an honest
// engine whose split-K count depends on the batch, the classic cause of batch variance,
// passes the tolerance-based batch property and fails the bitwise one, with both bit
// patterns and the ulp distance in the report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <regex>
#include <span>
#include <string>

#include "cpu/flash_engine.h"
#include "cpu/numerics_profiles.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/token_table.h"
#include "run/runner.h"

namespace kvfuzz {
namespace {

// The flash engine, except that a decode in a batch of several sequences runs as one pass
// over its keys (the prefill path) while a decode alone splits them into partitions: what
// a decode kernel does when it picks its split count from the batch size. Every row stays
// within the tolerance; only the order of the sums changes.
class SplitsByBatch : public cpu::FlashEngine {
 public:
  using cpu::FlashEngine::FlashEngine;
  int batch = 1;  // chunks in the current step, set before each step

 protected:
  void attend(const Query& query, int kv_head, cpu::KeyRange keys, float* out) override {
    Query q = query;
    if (batch > 1 && q.chunk_tokens == 1) q.chunk_tokens = 2;  // the one-pass path
    cpu::FlashEngine::attend(q, kv_head, keys, out);
  }
};

// SplitsByBatch behind the Engine interface, told each step's batch size, claiming batch
// invariance bit for bit or not, computing with a numerics profile or in f32.
class BatchVariantEngine : public Engine {
 public:
  BatchVariantEngine(const EngineConfig& config, bool claims_batch,
                     const cpu::NumericsProfile* profile)
      : inner_(config), claims_batch_(claims_batch) {
    if (profile != nullptr) inner_.declare(profile->numerics, profile->supports);
  }
  EngineCapabilities capabilities() const override { return inner_.capabilities(); }
  EngineNumerics numerics() const override { return inner_.numerics(); }
  EngineSupports supports() const override { return inner_.supports(); }
  BitwiseClaims bitwise_claims() const override {
    BitwiseClaims claims;
    claims.batch = claims_batch_;
    return claims;
  }
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    inner_.batch = static_cast<int>(chunks.size());
    inner_.step(chunks, outs);
  }
  void reset(int seq) override { inner_.reset(seq); }
  void truncate(int seq, int64_t keep) override { inner_.truncate(seq, keep); }
  void fork(int src, int dst) override { inner_.fork(src, dst); }

 private:
  SplitsByBatch inner_;
  bool claims_batch_;
};

EngineInfo batch_variant(bool claims_batch, const cpu::NumericsProfile* profile = nullptr) {
  EngineInfo info;
  info.name = claims_batch ? "splits-by-batch-claiming" : "splits-by-batch";
  info.description = "flash with a split count that depends on the batch";
  info.make = [claims_batch, profile](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<BatchVariantEngine>(config, claims_batch, profile);
  };
  return info;
}

TEST(Bitwise, TheBuiltInEnginesClaimWhatTheirSumsKeep) {
  const auto claims = [](const char* name) {
    EngineConfig config;  // the smallest layout, as probe_capabilities makes it
    config.sequences = 4;
    config.page_order = {0, 1, 2, 3};
    return find_engine(name)->make(config)->bitwise_claims();
  };
  const BitwiseClaims all{.batch = true, .schedule = true, .layout = true, .poison = true};
  EXPECT_EQ(claims("contiguous"), all);
  EXPECT_EQ(claims("paged"), all);
  // flash's prefill and decode paths sum in different orders: not the chunk schedule.
  EXPECT_EQ(claims("flash"),
            (BitwiseClaims{.batch = true, .schedule = false, .layout = true, .poison = true}));
}

TEST(Bitwise, TheBuiltInClaimsHoldOnGeneratedScenarios) {
  for (const char* name : {"contiguous", "paged", "flash"}) {
    const EngineInfo& engine = *find_engine(name);
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      PrngChoiceSource c(seed);
      const Scenario s = generate_scenario(c);
      for (Property p : {Property::batch, Property::schedule, Property::layout, Property::poison}) {
        const PropertyOutcome out = judge_property(p, s, engine);
        EXPECT_TRUE(out.pass) << name << " seed " << seed << ":\n" << out.report;
      }
    }
  }
}

TEST(Bitwise, ASplitCountThatFollowsTheBatchFailsOnlyTheBitwiseClaim) {
  const EngineInfo tolerant = batch_variant(false);
  const EngineInfo claiming = batch_variant(true);
  int bitwise_failures = 0;
  std::string report;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource c(seed);
    const Scenario s = generate_scenario(c);
    // Honest within the tolerance: prefix and the tolerance-based batch property pass.
    EXPECT_TRUE(judge_property(Property::prefix, s, tolerant).pass) << seed;
    EXPECT_TRUE(judge_property(Property::batch, s, tolerant).pass) << seed;
    const PropertyOutcome out = judge_property(Property::batch, s, claiming);
    if (out.pass) continue;
    ++bitwise_failures;
    EXPECT_EQ(out.signature->kind, FailureKind::mismatch) << out.report;
    EXPECT_EQ(out.first->bound, 0) << out.report;
    if (report.empty()) report = out.report;
  }
  EXPECT_GE(bitwise_failures, 5);
  EXPECT_NE(report.find("claims this invariance bit for bit: got 0x"), std::string::npos) << report;
  EXPECT_NE(report.find(" f32 ulp"), std::string::npos) << report;
  std::printf("%d of 200 scenarios break the claimed batch invariance; the first:\n%s",
              bitwise_failures, report.c_str());
}

// The same split change in an engine that rounds its rows to bf16 (the bf16 profile, as
// flash-bf16): a broken claim is reported in bf16, both values as bf16 bit patterns and
// their distance in bf16 ulps (a few; counted in f32, one bf16 step reads as 65,536 ulps).
// And the variant's value is "got", the base run's "expected": the base run's own row
// holds the expected value.
TEST(Bitwise, ABf16EnginesBrokenClaimIsCountedInBf16UlpsWithTheVariantAsGot) {
  const EngineInfo claiming = batch_variant(true, &cpu::numerics_profile("bf16"));
  GeneratorOptions options;
  options.filters.dtypes = {DType::bf16};
  int broken = 0;
  for (uint64_t seed = 1; seed <= 200 && broken < 3; ++seed) {
    PrngChoiceSource c(seed);
    const Scenario s = generate_scenario(c, options);
    const PropertyOutcome out = judge_property(Property::batch, s, claiming);
    if (out.pass) continue;
    ++broken;
    const Divergence& d = *out.first;
    ASSERT_EQ(d.kind, FailureKind::mismatch) << out.report;
    EXPECT_EQ(d.bound, 0) << out.report;
    const std::regex pattern(
        "bit for bit: got 0x[0-9a-f]{4} \\([^)]*\\) \\(the variant run: .*\\), expected "
        "0x[0-9a-f]{4} \\([^)]*\\) \\(the base run\\), [1-4] bf16 ulps? apart");
    EXPECT_TRUE(std::regex_search(out.report, pattern)) << out.report;
    const auto engine = claiming.make(engine_config(s));
    const EngineRun base = run_engine(s, TokenTable(s.tokens, s.layout), *engine);
    const auto row = std::find_if(base.rows.begin(), base.rows.end(),
                                  [&](const EngineRow& r) { return r.key == d.key; });
    ASSERT_NE(row, base.rows.end()) << out.report;
    const size_t i = static_cast<size_t>(d.q_head * s.layout.value_dim + d.dim);
    EXPECT_EQ(d.expected, static_cast<double>(row->values.at(i))) << out.report;
    EXPECT_NE(d.got, d.expected) << out.report;
  }
  EXPECT_GE(broken, 1);
}

}  // namespace
}  // namespace kvfuzz
