// The tolerance, tested both ways on the real CPU engines: the honest engines pass on
// adversarial data (long contexts, wide and uniform data, huge values, every dtype, RoPE at
// long positions) with room to spare, and every mutant misses by orders of magnitude.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "judge/report.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/prng.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

using test::worked_example;
using test::zero_score_tokens;

using Vec = std::vector<double>;

const EngineInfo& engine(std::string_view name) {
  const EngineInfo* info = find_engine(name);
  if (info == nullptr) throw std::runtime_error("no engine " + std::string(name));
  return *info;
}

const std::vector<std::string_view> kHonest = {"contiguous", "paged", "flash"};

// The largest |got - expected| / bound over every value the engine returned at a key of
// the program (0 / 0 counts as 0, anything / 0 as infinity).
double max_error_ratio(const Prepared& prepared, const EngineRun& run) {
  double worst = 0;
  for (const EngineRow& row : run.rows) {
    const auto it = prepared.reference.find(row.key);
    if (it == prepared.reference.end()) continue;
    const ReferenceRow& ref = it->second;
    const size_t value_dim = ref.values.size() / ref.bound.size();
    for (size_t i = 0; i < row.values.size() && i < ref.values.size(); ++i) {
      const double error = std::fabs(row.values[i] - ref.values[i]);
      const double bound = ref.bound[i / value_dim];
      const double ratio = error == 0 ? 0 : bound == 0 ? HUGE_VAL : error / bound;
      worst = std::isnan(ratio) ? HUGE_VAL : std::max(worst, ratio);
    }
  }
  return worst;
}

std::string describe(const CheckOutcome& outcome) {
  return outcome.verdict.first ? describe_divergence(*outcome.verdict.first) : "pass";
}

// Every honest engine passes, with max error / bound below 1; returns the worst ratio.
double expect_honest_pass(const Scenario& s, const std::string& label) {
  const auto start = std::chrono::steady_clock::now();
  const Prepared prepared = prepare(s);
  const double prepare_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double worst = 0;
  for (std::string_view name : kHonest) {
    const CheckOutcome outcome = judge_engine(s, prepared, engine(name));
    EXPECT_TRUE(outcome.verdict.pass) << label << ", engine " << name << ":\n" << describe(outcome);
    EXPECT_EQ(outcome.verdict.rows_compared, static_cast<int>(prepared.slots.size()));
    const double ratio = max_error_ratio(prepared, outcome.run);
    EXPECT_LT(ratio, 1.0) << label << ", engine " << name;
    std::printf("%-40s %-10s max error/bound %-9.3g (reference %.2fs, engine %.2fs)\n",
                label.c_str(), std::string(name).c_str(), ratio, prepare_seconds,
                outcome.engine_seconds);
    worst = std::max(worst, ratio);
  }
  return worst;
}

// One sequence of `n` tokens: two prefill chunks, then `decodes` one-token steps.
Scenario long_context(int n, int decodes, Distribution distribution, DType dtype,
                      std::optional<double> rope) {
  Scenario s;
  s.layout.q_heads = 4;
  s.layout.kv_heads = 2;
  s.layout.head_dim = 8;
  s.layout.value_dim = 4;
  s.layout.page_size = 16;
  s.layout.dtype = dtype;
  s.layout.rope_theta = rope;
  s.tokens = GeneratedTokens{.seed = 42, .count = n, .distribution = distribution};
  std::vector<int> first, second;
  const int prefill = n - decodes;
  for (int t = 0; t < prefill; ++t) (t < prefill / 2 ? first : second).push_back(t);
  s.program = {Op::append(0, first), Op::append(0, second)};
  for (int t = prefill; t < n; ++t) s.program.push_back(Op::append(0, {t}));
  s.placement.order = PageOrder::reversed;
  return s;
}

TEST(HonestEngines, LongContext) {
  expect_honest_pass(long_context(2000, 12, Distribution::uniform, DType::f32, std::nullopt),
                     "2000 tokens, uniform, f32");
}

TEST(HonestEngines, LongContextRope) {
  expect_honest_pass(long_context(2000, 12, Distribution::uniform, DType::f32, 10000.0),
                     "2000 tokens, uniform, f32, rope 1e4");
  expect_honest_pass(long_context(600, 8, Distribution::uniform, DType::bf16, 10000.0),
                     "600 tokens, uniform, bf16, rope 1e4");
}

TEST(HonestEngines, EveryDistributionAndDtype) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (Distribution distribution : {Distribution::small_int, Distribution::dyadic,
                                      Distribution::uniform, Distribution::wide}) {
      for (bool rope : {false, true}) {
        Scenario s = long_context(160, 6, distribution, dtype,
                                  rope ? std::optional<double>(10000.0) : std::nullopt);
        s.layout.page_size = 8;
        const char* names[] = {"small-int", "dyadic", "uniform", "wide"};
        const std::string label = std::string(dtype_name(dtype)) + ", " +
                                  names[static_cast<int>(distribution)] + (rope ? ", rope" : "");
        expect_honest_pass(s, label);
      }
    }
  }
}

// RoPE at long positions without a long reference: a window keeps each row at 16 keys
// while positions run to 3000.
TEST(HonestEngines, RopeAtLongPositionsWithWindow) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Scenario s = long_context(3000, 10, Distribution::uniform, dtype, 10000.0);
    s.layout.window = 16;
    expect_honest_pass(
        s, std::string("3000 tokens, window 16, rope, ") + std::string(dtype_name(dtype)));
  }
}

// Values around 1e6 (6e4 in f16, whose largest finite value is 65504), uniform q and k.
TEST(HonestEngines, HugeValues) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const double magnitude = dtype == DType::f16 ? 6e4 : 1e6;
    Xoshiro256 rng(9);
    std::vector<ExplicitToken> tokens;
    for (int t = 0; t < 300; ++t) {
      ExplicitToken token;
      token.q = {{uniform_from_bits(rng.next()), uniform_from_bits(rng.next())}};
      token.k = {{uniform_from_bits(rng.next()), uniform_from_bits(rng.next())}};
      token.v = {
          {magnitude * uniform_from_bits(rng.next()), magnitude * uniform_from_bits(rng.next())}};
      tokens.push_back(token);
    }
    Scenario s;
    s.layout.head_dim = 2;
    s.layout.value_dim = 2;
    s.layout.page_size = 4;
    s.layout.dtype = dtype;
    s.tokens = tokens;
    std::vector<int> prefill;
    for (int t = 0; t < 290; ++t) prefill.push_back(t);
    s.program = {Op::append(0, prefill)};
    for (int t = 290; t < 300; ++t) s.program.push_back(Op::append(0, {t}));
    expect_honest_pass(s, std::string("huge values, ") + std::string(dtype_name(dtype)));
  }
}

// Several sequences in batched steps, resets, poison, an explicit page order.
TEST(HonestEngines, BatchesResetsAndPoison) {
  for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    Scenario s;
    s.layout.q_heads = 6;
    s.layout.kv_heads = 3;
    s.layout.head_dim = 4;
    s.layout.value_dim = 3;
    s.layout.page_size = 4;
    s.layout.rope_theta = 10000.0;
    s.sequences = 3;
    s.tokens = GeneratedTokens{.seed = 5, .count = 64, .distribution = Distribution::dyadic};
    s.program = {Op::append(0, {0, 1, 2, 3, 4}),
                 Op::step({Chunk{1, {5, 6, 7}}, Chunk{2, {8}}, Chunk{0, {9, 10}}}),
                 Op::reset(0),
                 Op::step({Chunk{0, {11}}, Chunk{1, {12}}, Chunk{2, {13, 14, 15, 16, 17}}}),
                 Op::append(0, {18, 19, 20, 21, 22, 23}),
                 Op::reset(1),
                 Op::step({Chunk{1, {24}}, Chunk{0, {25}}, Chunk{2, {26}}})};
    s.placement.poison = poison;
    s.placement.pool_pages = 12;
    s.placement.order = PageOrder::explicit_list;
    s.placement.pages = {7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 4, 6};
    expect_honest_pass(s, "batches, resets, poison " + std::string(poison_name(poison)));
  }
}

// --- mutants: each fails on the scenario made for it, by far more than the bound ---

// Request A (2, 4, 8), reset, request B (16, 32, 64): B's rows are 16, 24, 112/3.
Scenario reset_scenario() {
  Scenario s;
  s.tokens = zero_score_tokens({2, 4, 8, 16, 32, 64});
  s.program = {Op::append(0, {0, 1, 2}), Op::reset(0), Op::append(0, {3, 4}), Op::append(0, {5})};
  return s;
}

// 4 q heads over 2 kv heads, nonzero scores (see test_reference's GroupedQueryHeads).
Scenario gqa_scenario() {
  const double l3 = std::log(3.0), l2 = std::log(2.0), l4 = std::log(4.0);
  const std::vector<Vec> q = {{l3, 0}, {0, l2}, {l4, 0}, {0, 0}};
  Scenario s;
  s.layout.q_heads = 4;
  s.layout.kv_heads = 2;
  s.layout.head_dim = 2;
  s.layout.scale = 1.0;
  s.tokens = std::vector<ExplicitToken>{ExplicitToken{q, {{1, 0}, {1, 1}}, {{1}, {10}}},
                                        ExplicitToken{q, {{0, 1}, {0, 0}}, {{3}, {20}}},
                                        ExplicitToken{q, {{1, 1}, {0, 1}}, {{5}, {40}}}};
  s.program = {Op::append(0, {0, 1}), Op::append(0, {2})};
  return s;
}

// Page size 4: five tokens fill one page and start the next, then one-token decodes land
// inside the partial page, whose tail is NaN.
Scenario page_tail_scenario(Poison poison) {
  Scenario s;
  s.layout.page_size = 4;
  s.tokens = zero_score_tokens({2, 4, 8, 16, 32, 64, 128});
  s.program = {Op::append(0, {0, 1, 2, 3, 4}), Op::append(0, {5}), Op::append(0, {6})};
  s.placement.poison = poison;
  return s;
}

void expect_mutant_caught(const Scenario& s, std::string_view mutant, FailureKind kind,
                          bool finite_error = true) {
  const std::string label = "mutant " + std::string(mutant);
  expect_honest_pass(s, label + "'s scenario");
  const Prepared prepared = prepare(s);
  const CheckOutcome outcome = judge_engine(s, prepared, engine(mutant));
  ASSERT_FALSE(outcome.verdict.pass) << label;
  ASSERT_TRUE(outcome.verdict.first.has_value());
  const Divergence& d = *outcome.verdict.first;
  EXPECT_EQ(d.kind, kind) << label << ":\n" << describe(outcome);
  if (finite_error) {
    EXPECT_GT(d.error, 1e3 * d.bound) << label << ":\n" << describe(outcome);
  }
  std::printf("%-44s first divergence:\n%s", label.c_str(), describe(outcome).c_str());
  if (d.bound > 0) std::printf("  error/bound %.3g\n", d.error / d.bound);
}

TEST(Mutants, MaskOriginOnWorkedExample) {
  expect_mutant_caught(worked_example(), "mask-origin", FailureKind::mismatch);
  const Prepared prepared = prepare(worked_example());
  const CheckOutcome outcome = judge_engine(worked_example(), prepared, engine("mask-origin"));
  ASSERT_TRUE(outcome.verdict.first.has_value());
  EXPECT_EQ(outcome.verdict.first->key, (RowKey{0, 0, 3}));
  EXPECT_EQ(outcome.verdict.first->got, 2);
  EXPECT_DOUBLE_EQ(outcome.verdict.first->expected, 7.5);
}

TEST(Mutants, StaleKvOnReset) {
  expect_mutant_caught(reset_scenario(), "stale-kv", FailureKind::mismatch);
}

TEST(Mutants, StalePositionOnReset) {
  // The next request's tokens come back at positions 3, 4, 5: every one of B's rows is
  // missing (the first divergence says where it went) and comes back as an extra row.
  expect_mutant_caught(reset_scenario(), "stale-position", FailureKind::wrong_position,
                       /*finite_error=*/false);
  const Scenario s = reset_scenario();
  const Prepared prepared = prepare(s);
  const CheckOutcome outcome = judge_engine(s, prepared, engine("stale-position"));
  ASSERT_TRUE(outcome.verdict.first.has_value());
  EXPECT_EQ(outcome.verdict.first->key, (RowKey{0, 1, 0}));
  EXPECT_NE(outcome.verdict.first->detail.find("reported this token at position 3"),
            std::string::npos)
      << outcome.verdict.first->detail;
}

TEST(Mutants, PageTailReadSeesPoison) {
  expect_mutant_caught(page_tail_scenario(Poison::nan), "page-tail-read", FailureKind::not_finite,
                       /*finite_error=*/false);
}

TEST(Mutants, WrongKvHeadUnderGqa) {
  expect_mutant_caught(gqa_scenario(), "wrong-kv-head", FailureKind::mismatch);
}

}  // namespace
}  // namespace kvfuzz
