// The shrinker's bookkeeping: the per-move counts add up to the totals and follow the
// progress reports, and a candidate already rejected is not judged again (not by the
// caller's judge, not by running the engine), which changes no result.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "forwarding_engine.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"
#include "shrink/moves.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

using test::engine;

// Failing scenarios of a few mutants, from the generator: long programs with plenty of
// repeated candidates.
std::vector<std::pair<const EngineInfo*, Scenario>> failing_scenarios() {
  std::vector<std::pair<const EngineInfo*, Scenario>> cases;
  for (const char* name : {"mask-origin", "stale-position", "wrong-kv-head"}) {
    const EngineInfo& mutant = engine(name);
    int found = 0;
    for (uint64_t seed = 1; seed < 200 && found < 2; ++seed) {
      PrngChoiceSource choices(seed);
      Scenario s = generate_scenario(choices);
      if (judge_property(Property::prefix, s, mutant).pass) continue;
      cases.emplace_back(&mutant, std::move(s));
      ++found;
    }
  }
  return cases;
}

void expect_counts_add_up(const ShrinkResult& result) {
  // One row per move in the search's order, then the split lookahead and the canonical form.
  std::vector<std::string> names;
  for (const shrinking::Move& move : shrinking::moves()) names.emplace_back(move.name);
  names.emplace_back(shrinking::split_move().name);
  names.emplace_back("canonical form");
  std::vector<std::string> rows;
  int tried = 0, accepted = 0, skipped = 0;
  for (const MoveCounts& row : result.moves) {
    rows.push_back(row.move);
    EXPECT_LE(row.accepted, row.tried) << row.move;
    tried += row.tried;
    accepted += row.accepted;
    skipped += row.skipped_seen;
  }
  EXPECT_EQ(rows, names);
  EXPECT_EQ(tried, result.tried);
  EXPECT_EQ(accepted, result.accepted);
  EXPECT_EQ(skipped, result.skipped_seen);
  EXPECT_EQ(result.candidates(), result.tried + result.skipped_seen);
  EXPECT_EQ(result.moves.back().accepted, 0);  // a split is never accepted by itself
}

TEST(ShrinkCounts, TheLookaheadsDropsCountInTheirOwnRows) {
  for (const shrinking::Move& drop : shrinking::drop_moves()) {
    bool found = false;
    for (const shrinking::Move& move : shrinking::moves()) {
      found = found || (move.name == drop.name && move.make == drop.make);
    }
    EXPECT_TRUE(found) << drop.name;
  }
}

TEST(ShrinkCounts, PerMoveCountsAddUpToTheTotalsAndFollowTheProgress) {
  int skipped = 0;
  for (const auto& [mutant, failing] : failing_scenarios()) {
    SCOPED_TRACE(mutant->name);
    std::map<std::string, int> accepted_by_move;
    int last_tried = 0, last_skipped = 0;
    ShrinkOptions options;
    options.on_progress = [&](const ShrinkProgress& p) {
      ++accepted_by_move[std::string(p.move)];
      EXPECT_GE(p.tried, last_tried);
      EXPECT_GE(p.skipped_seen, last_skipped);
      last_tried = p.tried;
      last_skipped = p.skipped_seen;
    };
    const auto result = shrink(failing, *mutant, options);
    ASSERT_TRUE(result);
    EXPECT_FALSE(result->timed_out);
    expect_counts_add_up(*result);
    for (const MoveCounts& row : result->moves) {
      EXPECT_EQ(row.accepted, accepted_by_move[row.move]) << row.move;
    }
    EXPECT_LE(last_tried, result->tried);
    skipped += result->skipped_seen;
  }
  EXPECT_GT(skipped, 0);  // the seen-set had something to do
}

TEST(ShrinkCounts, ABudgetOfZeroCountsNothing) {
  ShrinkOptions options;
  options.time_budget_seconds = 0;
  const auto result = shrink(test::worked_example(), engine("mask-origin"), options);
  ASSERT_TRUE(result);
  expect_counts_add_up(*result);
  EXPECT_EQ(result->skipped_seen, 0);
  EXPECT_EQ(result->candidates(), 0);
}

// The caller's judge sees every candidate at most once, and once per candidate tried.
TEST(ShrinkCounts, ShrinkWithNeverJudgesACandidateTwice) {
  int skipped = 0;
  for (const auto& [mutant, failing] : failing_scenarios()) {
    SCOPED_TRACE(mutant->name);
    const EngineInfo& judged_engine = *mutant;
    const FailureSignature signature =
        *judge_property(Property::prefix, failing, judged_engine).signature;
    std::map<std::string, int> judged;
    const auto result =
        shrink_with(failing,
                    [&](const Scenario& candidate) {
                      ++judged[write_fixture(candidate)];
                      const PropertyOutcome outcome =
                          judge_property(Property::prefix, candidate, judged_engine);
                      return !outcome.pass && outcome.signature && *outcome.signature == signature;
                    },
                    {});
    ASSERT_TRUE(result);
    int calls = 0;
    for (const auto& [text, times] : judged) {
      EXPECT_EQ(times, 1) << text;
      calls += times;
    }
    EXPECT_EQ(calls, result->tried + 1);  // the input once, then every candidate judged
    expect_counts_add_up(*result);
    // The same search as shrink() with the property: the same result.
    const auto by_property = shrink(failing, judged_engine, {});
    ASSERT_TRUE(by_property);
    EXPECT_EQ(result->scenario, by_property->scenario);
    EXPECT_EQ(result->tried, by_property->tried);
    EXPECT_EQ(result->skipped_seen, by_property->skipped_seen);
    skipped += result->skipped_seen;
  }
  EXPECT_GT(skipped, 0);
}

// shrink() runs the engine for the candidates it judges and for no others (besides the one
// probe of its declarations).
TEST(ShrinkCounts, ShrinkRunsTheEngineOnlyForCandidatesItJudges) {
  const EngineInfo& mutant = engine("stale-position");
  int made = 0;
  const EngineInfo counting{"counting-stale-position", "test engine", true,
                            [&](const EngineConfig& config) {
                              ++made;
                              return mutant.make(config);
                            }};
  for (const auto& [failing_engine, failing] : failing_scenarios()) {
    if (failing_engine != &mutant) continue;
    made = 0;
    ASSERT_FALSE(judge_property(Property::prefix, failing, counting).pass);
    const int per_judgement = made;  // engines one prefix judgement makes
    ASSERT_GT(per_judgement, 0);
    made = 0;
    const auto result = shrink(failing, counting, {});
    ASSERT_TRUE(result);
    EXPECT_GT(result->skipped_seen, 0);
    // The input, then each judged, and one engine made to ask for its declarations (so
    // that no candidate outside its supports is tried).
    EXPECT_EQ(made, per_judgement * (result->tried + 1) + 1);
    const auto plain = shrink(failing, mutant, {});
    ASSERT_TRUE(plain);
    EXPECT_EQ(result->scenario, plain->scenario);
  }
}

}  // namespace
}  // namespace kvfuzz
