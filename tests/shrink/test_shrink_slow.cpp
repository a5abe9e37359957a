// Shrinking on a slow engine (issue 26 item 4): whatever stops the search, the written
// fixture has no unused token-table entries, a budget can be given in candidates (the same
// result on every machine), and the result is never a longer fixture than the input.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>
#include <variant>
#include <vector>

#include "forwarding_engine.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"
#include "shrink/token_data.h"

namespace kvfuzz {
namespace {

using test::engine;

// `info`, each engine it makes costing 50 ms first (a transformers-sized construction).
EngineInfo slow(const EngineInfo& info) {
  EngineInfo slow_info = info;
  slow_info.name = "slow-" + info.name;
  const EngineFactory inner = info.make;
  slow_info.make = [inner](const EngineConfig& config) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return inner(config);
  };
  return slow_info;
}

// A generated scenario failing `mutant`'s prefix property, its table made explicit with 40
// more tokens the program never uses (as a fixture written from a half-shrunk scenario).
Scenario fat_failing(const EngineInfo& mutant) {
  for (uint64_t seed = 1; seed < 300; ++seed) {
    PrngChoiceSource choices(seed);
    Scenario s = generate_scenario(choices);
    if (s.model || judge_property(Property::prefix, s, mutant).pass) continue;
    std::vector<ExplicitToken> table = shrinking::materialise(s);
    const ExplicitToken spare = table.front();
    for (int i = 0; i < 40; ++i) table.push_back(spare);
    s.tokens = table;
    return s;
  }
  ADD_FAILURE() << "no failing scenario for " << mutant.name;
  return {};
}

// Every entry of the table is used, numbered in order of first use.
void expect_no_unused_entries(const Scenario& s) {
  const auto* table = std::get_if<std::vector<ExplicitToken>>(&s.tokens);
  ASSERT_NE(table, nullptr);
  const std::vector<int> order = shrinking::first_use_order(s);
  EXPECT_EQ(order.size(), table->size()) << write_fixture(s);
  EXPECT_TRUE(shrinking::numbered_in_first_use_order(order, table->size()));
}

TEST(ShrinkSlow, ACandidateBudgetStopsTheSearchAndTheFixtureKeepsNoUnusedEntry) {
  const EngineInfo& mutant = engine("stale-position");
  const Scenario fat = fat_failing(mutant);
  const EngineInfo slow_mutant = slow(mutant);
  ShrinkOptions options;
  options.max_candidates = 4;
  const auto start = std::chrono::steady_clock::now();
  const auto result = shrink(fat, slow_mutant, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->out_of_candidates);
  EXPECT_FALSE(result->timed_out);
  // Four candidates of the moves, then the canonical form: judged once more.
  EXPECT_EQ(result->tried, 5);
  EXPECT_TRUE(result->canonicalised);
  EXPECT_FALSE(result->kept_input);
  expect_no_unused_entries(result->scenario);
  EXPECT_LT(write_fixture(result->scenario).size(), write_fixture(fat).size());
  const PropertyOutcome outcome = judge_property(Property::prefix, result->scenario, mutant);
  ASSERT_TRUE(outcome.signature);
  EXPECT_EQ(*outcome.signature, result->signature);
  // The budget is a count: the same result again (on any machine, at any speed).
  const auto again = shrink(fat, slow_mutant, options);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->scenario, result->scenario);
  EXPECT_TRUE(result->first_look);
  EXPECT_EQ(stop_phrase(*result),
            ", cheap moves first, stopped at the candidate budget, canonical form");
  std::printf("4-candidate budget on a 50 ms engine: %.1f s, %zu -> %zu bytes\n", seconds,
              write_fixture(fat).size(), write_fixture(result->scenario).size());
}

// Cheap moves first: under a budget of 12 candidates every move's first candidate is judged
// before the passes, so the layout is cut as well as the program: head_dim 32 -> 1, 3 q
// heads -> 1, 61 ops -> 4. The passes alone spend such a budget on drops (61 ops -> 3) and
// leave the layout whole (tried: 20 candidates is enough for them to reach it too).
TEST(ShrinkSlow, ASmallCandidateBudgetCutsTheLayoutAsWellAsTheProgram) {
  const EngineInfo& mutant = engine("stale-position");
  const Scenario fat = fat_failing(mutant);
  ShrinkOptions options;
  options.max_candidates = 12;
  const auto result = shrink(fat, slow(mutant), options);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->first_look);
  const Layout& before = fat.layout;
  const Layout& after = result->scenario.layout;
  std::printf("12 candidates: head_dim %d -> %d, q_heads %d -> %d, ops %zu -> %zu\n",
              before.head_dim, after.head_dim, before.q_heads, after.q_heads, fat.program.size(),
              result->scenario.program.size());
  EXPECT_LT(after.head_dim * after.q_heads, before.head_dim * before.q_heads)
      << write_fixture(result->scenario);
  EXPECT_LT(result->scenario.program.size(), fat.program.size());
  // Above the threshold (or with a time budget alone) the passes run as before.
  options.max_candidates = kFirstLookBelow;
  const auto passes = shrink(fat, mutant, options);
  ASSERT_TRUE(passes);
  EXPECT_FALSE(passes->first_look);
}

TEST(ShrinkSlow, ATimeBudgetOnASlowEngineStillDropsTheUnusedEntries) {
  const EngineInfo& mutant = engine("stale-position");
  const Scenario fat = fat_failing(mutant);
  ShrinkOptions options;
  options.time_budget_seconds = 0.3;  // a few judgements of the slow engine at most
  const auto result = shrink(fat, slow(mutant), options);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->timed_out);
  EXPECT_TRUE(result->canonicalised);
  expect_no_unused_entries(result->scenario);
  EXPECT_LT(write_fixture(result->scenario).size(), write_fixture(fat).size());
}

TEST(ShrinkSlow, AResultLongerAsAFixtureThanTheInputIsNotKept) {
  // A generated table (a seed and a count: a short text) on a judge that keeps only the
  // same program with an explicit table: the one candidate it accepts (the table made
  // explicit, smaller in the shrinker's measure) is a much longer fixture.
  PrngChoiceSource choices(3);
  const Scenario input = generate_scenario(choices);
  ASSERT_TRUE(std::holds_alternative<GeneratedTokens>(input.tokens));
  const auto still_fails = [&](const Scenario& s) {
    return s == input || (std::holds_alternative<std::vector<ExplicitToken>>(s.tokens) &&
                          s.program == input.program && s.layout == input.layout);
  };
  const auto result = shrink_with(input, still_fails, {});
  ASSERT_TRUE(result);
  EXPECT_GE(result->accepted, 1);
  EXPECT_TRUE(result->kept_input);
  EXPECT_EQ(result->scenario, input);
}

TEST(ShrinkSlow, ACanonicalScenarioIsNotJudgedAgain) {
  // The canonical form is applied when it changes something; with nothing unused (and no
  // time for moves) nothing is judged after the search.
  const EngineInfo& mutant = engine("mask-origin");
  ShrinkOptions options;
  options.max_candidates = 1;
  const auto first = shrink(fat_failing(mutant), mutant, options);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->canonicalised);
  options.time_budget_seconds = 0;
  const auto second = shrink(first->scenario, mutant, options);
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->canonicalised);
  EXPECT_EQ(second->tried, 0);
  EXPECT_EQ(second->scenario, first->scenario);
}

}  // namespace
}  // namespace kvfuzz
