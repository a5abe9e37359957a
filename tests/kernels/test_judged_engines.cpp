// The engines through the judge: prepare(scenario) + judge_engine(scenario, prepared,
// engine). The honest engines pass hand-built, generated and random truncate/fork
// scenarios; every mutant fails its matching scenario where and how it should.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_tests.h"
#include "generated_cases.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/prng.h"

namespace kvfuzz::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, HonestEngine, ::testing::ValuesIn(honest_engines()));

// ---------------------------------------------------------------------------------------
// Scenarios

// Appends tokens [first, first + sum(sizes)) to seq, one op per chunk size.
void append_schedule(std::vector<Op>& program, int seq, int first, const std::vector<int>& sizes) {
  for (int size : sizes) {
    program.push_back(Op::append(seq, ids(first, size)));
    first += size;
  }
}

Scenario make_scenario(std::string name, const Layout& layout, TokenSource tokens,
                       std::vector<Op> program, int sequences = 1, Placement placement = {}) {
  Scenario s;
  s.name = std::move(name);
  s.layout = layout;
  s.tokens = std::move(tokens);
  s.sequences = sequences;
  s.program = std::move(program);
  s.placement = std::move(placement);
  return s;
}

// The worked example's tokens: q = k = 0, values 2, 4, 8, ... (n of them).
std::vector<ExplicitToken> worked_tokens(int n) {
  std::vector<double> values;
  for (int t = 0; t < n; ++t) values.push_back(std::ldexp(1.0, t + 1));
  return zero_score_tokens(values);
}

Layout tiny_layout(int page_size = 4) {
  return make_layout({.page_size = page_size});
}

// The worked example (test_scenarios.h) on pages of 4.
Scenario worked_scenario() {
  Scenario s = worked_example();
  s.layout = tiny_layout();
  return s;
}

Scenario one_token_cache_scenario() {
  return make_scenario("one-token-cache", tiny_layout(), worked_tokens(3),
                       {Op::append(0, {0}), Op::append(0, {1}), Op::append(0, {2})});
}

Scenario reset_scenario() {
  return make_scenario("reset-two-requests", tiny_layout(), worked_tokens(5),
                       {Op::append(0, {0, 1, 2}), Op::reset(0), Op::append(0, {3, 4})});
}

Scenario page_tail_scenario(Poison poison) {
  Placement placement;
  placement.poison = poison;
  return make_scenario("poisoned-page-tail", tiny_layout(), worked_tokens(3),
                       {Op::append(0, {0, 1}), Op::append(0, {2})}, 1, placement);
}

Scenario gqa_scenario(int kv_heads) {
  const Layout l = make_layout(
      {.q_heads = 4, .kv_heads = kv_heads, .head_dim = 4, .value_dim = 3, .page_size = 3});
  std::vector<Op> program;
  append_schedule(program, 0, 0, {5, 1, 1, 6, 1});
  return make_scenario("gqa", l, GeneratedTokens{41, 14, Distribution::dyadic, false}, program);
}

Scenario multistep_scenario(DType dtype, std::optional<int> window, Placement placement) {
  const Layout l = make_layout({.q_heads = 2,
                                .kv_heads = 1,
                                .head_dim = 4,
                                .value_dim = 2,
                                .page_size = 3,
                                .dtype = dtype,
                                .rope_theta = 10000.0,
                                .window = window});
  std::vector<Op> program;
  program.push_back(Op::append(0, ids(0, 4)));
  program.push_back(Op::step({Chunk{1, ids(4, 2)}, Chunk{0, ids(6, 1)}, Chunk{2, ids(7, 9)}}));
  program.push_back(Op::reset(1));
  program.push_back(Op::step({Chunk{1, ids(16, 5)}, Chunk{2, ids(21, 1)}}));
  for (int i = 0; i < 45; ++i) program.push_back(Op::append(2, {22 + i}));  // past the split
  program.push_back(Op::reset(0));
  program.push_back(Op::step({Chunk{0, ids(67, 3)}, Chunk{1, ids(70, 1)}}));
  return make_scenario("multistep", l, GeneratedTokens{43, 71, Distribution::dyadic, false},
                       program, 3, placement);
}

Scenario long_context_scenario(DType dtype, Distribution distribution, bool rope) {
  Layout l = long_context_layout();
  l.dtype = dtype;
  if (!rope) l.rope_theta.reset();
  std::vector<Op> program;
  append_schedule(program, 0, 0, {600, 1, 1, 450, 1, 1, 7, 1, 1, 1});
  return make_scenario("long-context", l, GeneratedTokens{47, 1064, distribution, false}, program);
}

// ---------------------------------------------------------------------------------------
// Judging

std::string describe(const Verdict& verdict) {
  if (verdict.pass || !verdict.first) return "pass";
  const Divergence& d = *verdict.first;
  return std::string(failure_kind_name(d.kind)) + " at " + to_string(d.key) + " q head " +
         std::to_string(d.q_head) + " dim " + std::to_string(d.dim) + ": got " +
         std::to_string(d.got) + ", expected " + std::to_string(d.expected) + " (bound " +
         std::to_string(d.bound) + ") " + d.detail;
}

bool passes(const Scenario& scenario, const std::string& engine, std::string* why = nullptr) {
  const Prepared prepared = prepare(scenario);
  const CheckOutcome outcome = judge_engine(scenario, prepared, *find_engine(engine));
  if (why != nullptr) *why = describe(outcome.verdict);
  return outcome.verdict.pass;
}

CheckOutcome check(const Scenario& scenario, const std::string& engine) {
  return judge_engine(scenario, prepare(scenario), *find_engine(engine));
}

std::vector<Scenario> honest_scenarios() {
  std::vector<Scenario> all{worked_scenario(), one_token_cache_scenario(), reset_scenario(),
                            gqa_scenario(2), gqa_scenario(1)};
  for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    all.push_back(page_tail_scenario(poison));
  }
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (std::optional<int> window : {std::optional<int>{}, std::optional<int>{5}}) {
      for (PageOrder order : {PageOrder::identity, PageOrder::reversed}) {
        Placement placement;
        placement.order = order;
        placement.poison = order == PageOrder::identity ? Poison::nan : Poison::huge;
        all.push_back(multistep_scenario(dtype, window, placement));
      }
    }
  }
  // Long contexts, RoPE on: every dtype, uniform and wide data.
  all.push_back(long_context_scenario(DType::f32, Distribution::uniform, true));
  all.push_back(long_context_scenario(DType::f32, Distribution::wide, true));
  all.push_back(long_context_scenario(DType::f16, Distribution::uniform, true));
  all.push_back(long_context_scenario(DType::bf16, Distribution::wide, true));
  return all;
}

// Prepared once for all engines: the long-context references dominate the cost.
const std::vector<std::pair<Scenario, Prepared>>& prepared_honest_scenarios() {
  static const auto all = [] {
    std::vector<std::pair<Scenario, Prepared>> out;
    for (Scenario& scenario : honest_scenarios()) {
      Prepared prepared = prepare(scenario);
      out.emplace_back(std::move(scenario), std::move(prepared));
    }
    return out;
  }();
  return all;
}

// ---------------------------------------------------------------------------------------
// Honest engines pass, mutants fail

TEST_P(HonestEngine, PassesCheckEngineOnEveryScenario) {
  for (const auto& [scenario, prepared] : prepared_honest_scenarios()) {
    const CheckOutcome outcome = judge_engine(scenario, prepared, *find_engine(GetParam()));
    EXPECT_TRUE(outcome.verdict.pass) << scenario.name << ": " << describe(outcome.verdict) << " ("
                                      << poison_name(scenario.placement.poison) << ", "
                                      << dtype_name(scenario.layout.dtype) << ")";
  }
}

// The default build runs every case; ASan + UBSan a fifth unless KVFUZZ_TEST_LONG=1
// (tests/generated_cases.h). A default build that ran fewer would lose cases silently.
TEST(GeneratedCases, EveryCaseInTheDefaultBuildAFifthUnderTheSanitizersAllWithLong) {
  const char* before = std::getenv("KVFUZZ_TEST_LONG");
  const std::string saved = before ? before : "";
  ::unsetenv("KVFUZZ_TEST_LONG");
  EXPECT_EQ(generated_cases(300), kSanitized ? 60u : 300u);
  EXPECT_EQ(generated_cases(4), kSanitized ? 1u : 4u);
  ::setenv("KVFUZZ_TEST_LONG", "1", 1);
  EXPECT_EQ(generated_cases(300), 300u);
  if (before) {
    ::setenv("KVFUZZ_TEST_LONG", saved.c_str(), 1);
  } else {
    ::unsetenv("KVFUZZ_TEST_LONG");
  }
}

TEST_P(HonestEngine, PassesGeneratedScenarios) {
  for (uint64_t seed = 1; seed <= generated_cases(300); ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario scenario = generate_scenario(choices);
    std::string why;
    ASSERT_TRUE(passes(scenario, GetParam(), &why)) << "seed " << seed << ": " << why;
  }
}

TEST(MutantCheck, EachFailsItsMatchingScenario) {
  {
    const CheckOutcome o = check(worked_scenario(), "mask-origin");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::mismatch);
    EXPECT_EQ(o.verdict.first->key, (RowKey{0, 0, 3}));
    EXPECT_FLOAT_EQ(static_cast<float>(o.verdict.first->got), 2.0f);
    EXPECT_DOUBLE_EQ(o.verdict.first->expected, 7.5);
    EXPECT_FALSE(passes(one_token_cache_scenario(), "mask-origin"));
  }
  {
    const CheckOutcome o = check(reset_scenario(), "stale-kv");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::mismatch);
    EXPECT_EQ(o.verdict.first->key, (RowKey{0, 1, 0}));
    EXPECT_FLOAT_EQ(static_cast<float>(o.verdict.first->got), 7.5f);
    EXPECT_DOUBLE_EQ(o.verdict.first->expected, 16.0);
  }
  {
    const CheckOutcome o = check(reset_scenario(), "stale-position");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::wrong_position)
        << failure_kind_name(o.verdict.first->kind);
  }
  for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    const CheckOutcome o = check(page_tail_scenario(poison), "page-tail-read");
    ASSERT_FALSE(o.verdict.pass) << poison_name(poison);
    EXPECT_EQ(o.verdict.first->key, (RowKey{0, 0, 2})) << poison_name(poison);
  }
  EXPECT_EQ(check(page_tail_scenario(Poison::nan), "page-tail-read").verdict.first->kind,
            FailureKind::not_finite);
  {
    const CheckOutcome o = check(gqa_scenario(2), "wrong-kv-head");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::mismatch);
    EXPECT_EQ(o.verdict.first->q_head, 1);
    EXPECT_TRUE(passes(gqa_scenario(1), "wrong-kv-head"));  // MQA: the mapping coincides
  }
}

TEST(MutantCheck, EveryMutantIsKilledByGeneratedScenarios) {
  for (const EngineInfo& info : engine_registry()) {
    if (!info.mutant) continue;
    // The attention features it declares, drawn as check draws them (the rest: defaults).
    GeneratorOptions options;
    const EngineSupports declared = info.make(config_for(Layout{}))->supports();
    for (bool EngineSupports::*feature : kFeatureSupports) {
      options.supports.*feature = declared.*feature;
    }
    int killed = 0;
    for (uint64_t seed = 1; seed <= 300 && killed == 0; ++seed) {
      PrngChoiceSource choices(seed);
      if (!passes(generate_scenario(choices, options), info.name)) ++killed;
    }
    EXPECT_GT(killed, 0) << info.name;
  }
}

// ---------------------------------------------------------------------------------------
// Truncate and fork: the runner, the reference and the comparator

// The worked example rolled back: 2, 4, 8, 16, 32, keep 2, then 64 at position 2 and 128
// at position 3 of epoch 1: (2+4+64)/3 and (2+4+64+128)/4.
Scenario truncate_scenario() {
  return make_scenario(
      "truncate-rollback", tiny_layout(), worked_tokens(7),
      {Op::append(0, {0, 1, 2, 3, 4}), Op::truncate(0, 2), Op::append(0, {5}), Op::append(0, {6})});
}

// Sequence 0 takes 2, 4, 8; sequence 1 forks it (epoch 1, continuing at 3), then both
// append, sequence 1 twice.
Scenario fork_scenario(int page_size) {
  return make_scenario("fork-shared-prefix", tiny_layout(page_size), worked_tokens(6),
                       {Op::append(0, {0, 1, 2}), Op::fork(0, 1), Op::append(1, {3}),
                        Op::append(0, {4}), Op::append(1, {5})},
                       2);
}

// A deterministic random program over three sequences: appends, two-sequence steps,
// resets, truncates (anywhere in [0, length]) and forks; GQA, RoPE, pages of 3.
Scenario random_truncate_fork_scenario(uint64_t seed, DType dtype, Placement placement) {
  Layout l = fork_layout();
  l.page_size = 3;
  l.dtype = dtype;
  Xoshiro256 rng(seed);
  std::vector<int64_t> length(3, 0);
  std::vector<Op> program{Op::append(0, ids(0, 4))};
  length[0] = 4;
  int next = 4;
  for (int op = 0; op < 24; ++op) {
    const auto seq = static_cast<int>(rng.between(0, 2));
    const auto s = static_cast<size_t>(seq);
    const int64_t kind = length[s] > 20 ? 2 : rng.between(0, 5);
    if (kind == 0) {
      const auto n = static_cast<int>(rng.between(1, 5));
      program.push_back(Op::append(seq, ids(next, n)));
      next += n;
      length[s] += n;
    } else if (kind == 1) {
      const int other = (seq + 1) % 3;
      const auto n = static_cast<int>(rng.between(1, 4));
      program.push_back(Op::step({Chunk{seq, ids(next, n)}, Chunk{other, ids(next + n, 1)}}));
      next += n + 1;
      length[s] += n;
      length[static_cast<size_t>(other)] += 1;
    } else if (kind == 2) {
      const int64_t keep = rng.between(0, length[s]);
      program.push_back(Op::truncate(seq, keep));
      length[s] = keep;
    } else if (kind == 3) {
      program.push_back(Op::reset(seq));
      length[s] = 0;
    } else {
      const int dst = (seq + static_cast<int>(rng.between(1, 2))) % 3;
      program.push_back(Op::fork(seq, dst));
      length[static_cast<size_t>(dst)] = length[s];
    }
  }
  return make_scenario("random-truncate-fork-" + std::to_string(seed), l,
                       GeneratedTokens{seed, next, Distribution::dyadic, false}, program, 3,
                       std::move(placement));
}

TEST_P(HonestEngine, PassesTruncateAndForkScenarios) {
  std::vector<Scenario> all{truncate_scenario(), fork_scenario(4), fork_scenario(2),
                            fork_scenario(1)};
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Placement placement;
    placement.order = seed % 2 == 0 ? PageOrder::reversed : PageOrder::identity;
    placement.poison = seed % 3 == 0 ? Poison::huge : Poison::nan;
    const DType dtype = seed % 5 == 0 ? DType::bf16 : seed % 5 == 1 ? DType::f16 : DType::f32;
    all.push_back(random_truncate_fork_scenario(seed, dtype, placement));
  }
  for (const Scenario& scenario : all) {
    std::string why;
    EXPECT_TRUE(passes(scenario, GetParam(), &why)) << scenario.name << ": " << why;
  }
}

TEST(MutantCheck, TruncateKeepsPositionFailsAtTheOldLength) {
  EXPECT_TRUE(passes(truncate_scenario(), "contiguous"));
  const CheckOutcome o = check(truncate_scenario(), "truncate-keeps-position");
  ASSERT_FALSE(o.verdict.pass);
  const Divergence& d = *o.verdict.first;
  EXPECT_EQ(d.kind, FailureKind::wrong_position) << failure_kind_name(d.kind);
  EXPECT_EQ(d.key, (RowKey{0, 1, 2}));  // expected here, after the kept 2 tokens
  EXPECT_NE(d.detail.find("position 5"), std::string::npos) << d.detail;  // the old length
}

TEST(MutantCheck, ForkRestartsPositionsFailsAtTheChildsFirstRow) {
  for (int page_size : {4, 2, 1}) {
    SCOPED_TRACE("page size " + std::to_string(page_size));
    EXPECT_TRUE(passes(fork_scenario(page_size), "paged"));
    const CheckOutcome o = check(fork_scenario(page_size), "fork-restarts-positions");
    ASSERT_FALSE(o.verdict.pass);
    const Divergence& d = *o.verdict.first;
    EXPECT_EQ(d.kind, FailureKind::wrong_position) << failure_kind_name(d.kind);
    EXPECT_EQ(d.key, (RowKey{1, 1, 3}));  // the child's first row, at length(src)
    EXPECT_NE(d.detail.find("position 0"), std::string::npos) << d.detail;
  }
}

TEST(MutantCheck, TruncateAndForkMutantsAreKilledByRandomPrograms) {
  for (const char* name : {"truncate-keeps-position", "fork-restarts-positions"}) {
    int killed = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      if (!passes(random_truncate_fork_scenario(seed, DType::f32, {}), name)) ++killed;
    }
    EXPECT_GE(killed, 10) << name;
  }
}

}  // namespace
}  // namespace kvfuzz::test
