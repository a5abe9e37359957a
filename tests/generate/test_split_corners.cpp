// Two corners of split decoding the generator must reach (issue 15): score spreads across
// split partitions past f32's exp range (generate/score_spreads.h) and split edges against
// the batch's longest decode (generate/split_edges.h). Each occurs at a stated rate over
// generated cases, and each is what kills its mutant: split-merge-first-max fails exactly
// the scenarios with a partition whose max exceeds the first's by more than ln(FLT_MAX),
// split-edge-nan exactly those with a shorter batched row ending on a partition edge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "generate/score_spreads.h"
#include "generate/split_edges.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {
namespace {

constexpr int kCases = 400;
constexpr EngineEdges kEdges{};

Scenario generated(int index) {
  PrngChoiceSource c(case_seed(1, index));
  return generate_scenario(c);
}

int qk_log2_of(const Scenario& s) {
  const auto* generated = std::get_if<GeneratedTokens>(&s.tokens);
  return generated ? generated->qk_log2 : 0;
}

TEST(ScoreSpreads, ReachPastExpRangeAtTheirRate) {
  int first_max = 0, unshifted = 0, split = 0, by_magnitude = 0, first_max_by_magnitude = 0;
  for (int i = 0; i < kCases; ++i) {
    const Scenario s = generated(i);
    const SplitSpreadCounts counts = count_split_spreads(s, kEdges);
    split += counts.split_rows > 0;
    first_max += counts.first_max_overflows > 0;
    unshifted += counts.unshifted_out_of_range > 0;
    by_magnitude += qk_log2_of(s) > 0;
    first_max_by_magnitude += qk_log2_of(s) > 0 && counts.first_max_overflows > 0;
  }
  std::printf(
      "of %d cases: %d with split rows, %d with a partition max > the first's + 88.7 (%d of "
      "them with large q and k), %d with every max outside exp's range; %d with large q and "
      "k\n",
      kCases, split, first_max, first_max_by_magnitude, unshifted, by_magnitude);
  // Measured (seed 1, 400 cases): 26 and 31 of 400 (6.5%, 7.8%; the same 26 and 31 with
  // every spread by the scale alone), 10 of the 26 by large q and k, 48 cases with large q
  // and k; without any spread 0 and 0. The bounds are about two thirds of those.
  EXPECT_GE(first_max, kCases * 4 / 100);
  EXPECT_GE(unshifted, kCases * 5 / 100);
  EXPECT_GE(by_magnitude, kCases * 8 / 100);
  EXPECT_GE(first_max_by_magnitude, 6);
}

// A spread by magnitude: q and k as large as an unscaled product of 2^15 allows, then the
// scale to the bound; the unscaled limit holds for every head_dim.
TEST(ScoreSpreads, ByMagnitudeQAndKGrowWithinTheUnscaledLimit) {
  for (int head_dim : {1, 4, 64, 128, 512}) {
    for (int bound_log2 : {12, 14, 16}) {
      Scenario s;
      s.name = "magnitude";
      s.layout.head_dim = head_dim;
      s.tokens = GeneratedTokens{7, 4, Distribution::small_int, true};
      s.program = {Op::append(0, {0, 1, 2, 3})};
      apply_score_spread({.on = true, .bound_log2 = bound_log2, .by_magnitude = true}, s);
      const int e = qk_log2_of(s);
      const double unscaled = 16.0 * head_dim * std::ldexp(1.0, 2 * e);
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", bound 2^" +
                   std::to_string(bound_log2));
      EXPECT_LE(unscaled, std::ldexp(1.0, kSpreadUnscaledLog2));
      EXPECT_GT(unscaled * 4, std::ldexp(1.0, std::min(kSpreadUnscaledLog2, bound_log2)));
      ASSERT_TRUE(s.layout.scale.has_value());
      EXPECT_LE(*s.layout.scale * unscaled, std::ldexp(1.0, bound_log2));
      EXPECT_GT(*s.layout.scale * unscaled, std::ldexp(1.0, bound_log2 - 1));
      if (head_dim <= 64 && bound_log2 >= 14) {
        EXPECT_GE(e, 2);  // |q|, |k| up to 16 and more
      }
      const auto error = validate(s);
      EXPECT_FALSE(error.has_value()) << error->path << ": " << error->message;
    }
  }
}

ExplicitToken token(double q, double k, double v) {
  return ExplicitToken{{{q}}, {{k}}, {{v}}};
}

// scale * 4^2 * head_dim (the largest score small integers give) is the bound, or at most
// half of it short; the values and the tokens are untouched.
TEST(ScoreSpreads, ScaleIsThePowerOfTwoThatBoundsEveryScore) {
  Scenario s;
  s.name = "spread";
  s.layout.head_dim = 3;
  s.tokens = std::vector<ExplicitToken>{token(1, 3, 1), token(-4, 2, 2)};
  for (ExplicitToken& t : std::get<std::vector<ExplicitToken>>(s.tokens)) {
    t.q[0] = {t.q[0][0], 0, 0};
    t.k[0] = {t.k[0][0], 0, 0};
  }
  s.program = {Op::append(0, {0, 1})};
  for (int bound_log2 : {12, 14, 16}) {
    Scenario spread = s;
    apply_score_spread({.on = true, .bound_log2 = bound_log2}, spread);
    EXPECT_EQ(spread.tokens, s.tokens);
    ASSERT_TRUE(spread.layout.scale.has_value());
    const double bound = *spread.layout.scale * 16 * 3;
    EXPECT_LE(bound, std::ldexp(1.0, bound_log2));
    EXPECT_GT(bound, std::ldexp(1.0, bound_log2 - 1));
    const auto error = validate(spread);
    EXPECT_FALSE(error.has_value()) << error->path << ": " << error->message;
  }
  Scenario off = s;
  apply_score_spread({.on = false, .bound_log2 = 14}, off);
  EXPECT_EQ(off, s);
}

TEST(ScoreSpreads, GeneratedDataGetsNonZeroScores) {
  Scenario s;
  s.tokens = GeneratedTokens{7, 4, Distribution::small_int, true};
  s.program = {Op::append(0, {0, 1, 2, 3})};
  apply_score_spread({.on = true, .bound_log2 = 12}, s);
  EXPECT_FALSE(std::get<GeneratedTokens>(s.tokens).zero_scores);
  EXPECT_TRUE(s.layout.scale.has_value());
}

// One seed in four, never the seed 0; every bound reached.
TEST(ScoreSpreads, OneTokenSeedInFourSpreads) {
  int on = 0;
  std::set<int> bounds;
  for (uint64_t seed = 1; seed <= 4000; ++seed) {
    const ScoreSpreadChoices c = score_spread_from_seed(seed);
    on += c.on;
    if (c.on) bounds.insert(c.bound_log2);
  }
  EXPECT_NEAR(on, 1000, 100);
  EXPECT_EQ(bounds, (std::set<int>{12, 14, 16}));
  int by_magnitude = 0;
  for (uint64_t seed = 1; seed <= 4000; ++seed) {
    const ScoreSpreadChoices c = score_spread_from_seed(seed);
    by_magnitude += c.on && c.by_magnitude;
  }
  EXPECT_NEAR(by_magnitude, on / 2, 80);
  EXPECT_FALSE(score_spread_from_seed(0).on);
}

// The mutant's merge is exact arithmetic's: it is wrong exactly where exp(m_p - m_0)
// overflows, which the spread counts predict.
TEST(ScoreSpreads, TheFirstMaxMutantFailsExactlyWhereAPartitionOverflows) {
  const EngineInfo& mutant = *find_engine("split-merge-first-max");
  int predicted = 0;
  for (int i = 0; i < 120; ++i) {
    const Scenario s = generated(i);
    const bool overflows = count_split_spreads(s, kEdges).first_max_overflows > 0;
    predicted += overflows;
    EXPECT_EQ(judge_property(Property::prefix, s, mutant).pass, !overflows) << "case " << i;
  }
  EXPECT_GE(predicted, 3);
}

// Large q and k are what spreads these scores: the mutant fails spreads by magnitude, and
// where the same scenario with qk_log2 0 (the same scale) overflows nowhere, it passes.
TEST(ScoreSpreads, ByMagnitudeTheLargeQAndKAreWhatKillsTheFirstMaxMutant) {
  const EngineInfo& mutant = *find_engine("split-merge-first-max");
  int killed = 0, only_by_magnitude = 0;
  for (int i = 0; i < kCases && only_by_magnitude < 3; ++i) {
    Scenario s = generated(i);
    if (qk_log2_of(s) == 0 || count_split_spreads(s, kEdges).first_max_overflows == 0) continue;
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_FALSE(judge_property(Property::prefix, s, mutant).pass);
    ++killed;
    std::get<GeneratedTokens>(s.tokens).qk_log2 = 0;
    if (count_split_spreads(s, kEdges).first_max_overflows != 0) continue;
    EXPECT_TRUE(judge_property(Property::prefix, s, mutant).pass);
    ++only_by_magnitude;
  }
  std::printf("killed by magnitude spreads: %d, of which only with large q and k: %d\n", killed,
              only_by_magnitude);
  EXPECT_EQ(only_by_magnitude, 3);
}

TEST(SplitEdges, PlanBringsTheBatchToEdgesBelowTheLeader) {
  SplitEdgeChoices c;
  c.on = true;
  c.leader = 0;
  c.leader_edge = 2;  // partition edges at and above the threshold 32: 32, 48, ...: 48
  c.leader_offset = 0;
  c.decodes = 3;
  c.followers = {{},
                 {.joins = true, .kind = SplitFollower::partition_edge, .partitions_below = 1},
                 {.joins = true, .kind = SplitFollower::tiny, .tiny = 2},
                 {.joins = true, .kind = SplitFollower::threshold, .offset = -1},
                 {.joins = false}};
  const SplitEdgePlan plan =
      plan_split_edges(c, {0, 10, 0, 40, 0}, {100, 100, 100, 100, 100}, kEdges, true);
  // Each first decode sees length + fill + 1 keys: 48, 32 (the edge below the leader's
  // last partition), 2, 41 (already past 31: nothing to add).
  EXPECT_EQ(plan.fill, (std::vector<int>{47, 21, 1, 0, 0}));
  EXPECT_EQ(plan.batch, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.decodes, 3);
  // Without batched steps only the leader runs; without room nothing is added.
  EXPECT_EQ(plan_split_edges(c, {0, 0, 0, 0, 0}, {100, 100, 100, 100, 100}, kEdges, false).batch,
            (std::vector<int>{0}));
  EXPECT_EQ(plan_split_edges(c, {0, 0, 0, 0, 0}, {3, 3, 3, 3, 3}, kEdges, true).fill,
            (std::vector<int>{0, 0, 0, 0, 0}));
  c.on = false;
  EXPECT_TRUE(plan_split_edges(c, {0, 0, 0, 0, 0}, {9, 9, 9, 9, 9}, kEdges, true).batch.empty());
}

TEST(SplitEdges, BatchedRowsReachEverySideOfTheEdgesAtTheirRate) {
  int below = 0, on = 0, past = 0, before = 0;
  for (int i = 0; i < kCases; ++i) {
    const BatchSplitEdgeCounts counts = count_batch_split_edges(generated(i), kEdges);
    below += counts.below_threshold > 0;
    on += counts.on_edge > 0;
    past += counts.past_edge > 0;
    before += counts.before_edge > 0;
  }
  std::printf(
      "of %d cases, a shorter row of a batched split decode: %d below the threshold, "
      "%d on a partition edge, %d one past, %d one before\n",
      kCases, below, on, past, before);
  // Measured (seed 1, 400 cases): 67, 41, 59, 34; without the split-edge tail 49, 23, 40,
  // 23. The bounds lie between the two, so the tail is what meets them.
  EXPECT_GE(below, kCases * 14 / 100);
  EXPECT_GE(on, kCases * 8 / 100);
  EXPECT_GE(past, kCases * 12 / 100);
  EXPECT_GE(before, kCases * 7 / 100);
}

TEST(SplitEdges, TheEdgeMutantFailsExactlyWhereARowEndsOnAnEdge) {
  const EngineInfo& mutant = *find_engine("split-edge-nan");
  int predicted = 0;
  for (int i = 0; i < 120; ++i) {
    const Scenario s = generated(i);
    const bool on_edge = count_batch_split_edges(s, kEdges).on_edge > 0;
    predicted += on_edge;
    EXPECT_EQ(judge_property(Property::prefix, s, mutant).pass, !on_edge) << "case " << i;
  }
  EXPECT_GE(predicted, 3);
}

}  // namespace
}  // namespace kvfuzz
