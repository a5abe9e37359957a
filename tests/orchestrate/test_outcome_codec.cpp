// The outcome codec (orchestrate/outcome_codec.h): what a judgement made in a forked child
// sends back. Every field of the first divergence must survive, the model site, layer and
// top-5 logits included, and doubles bit for bit (NaN and infinities too), or an isolated
// replay or shrink prints another report than the same judgement in this process.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "orchestrate/outcome_codec.h"

namespace kvfuzz {
namespace {

PropertyOutcome round_trip(const PropertyOutcome& outcome) {
  return orchestrate::outcome_from_json(
      nlohmann::json::parse(orchestrate::outcome_to_json(outcome).dump()));
}

uint64_t bits(double x) {
  return std::bit_cast<uint64_t>(x);
}

TEST(OutcomeCodec, AnAttentionDivergenceSurvivesBitForBit) {
  PropertyOutcome outcome;
  outcome.pass = false;
  outcome.report = "prefix: ...\n";
  outcome.rows_compared = 7;
  outcome.rows_unjudged = 2;
  outcome.signature = FailureSignature{Property::layout, FailureKind::not_finite};
  Divergence d;
  d.kind = FailureKind::not_finite;
  d.key = RowKey{1, 2, 300};
  d.origin = RowOrigin{4, 5, 6};
  d.q_head = 3;
  d.dim = 9;
  d.got = std::numeric_limits<double>::quiet_NaN();
  d.expected = -0.0;
  d.error = HUGE_VAL;
  d.bound = 1e-300;
  d.key_lo = 10;
  d.key_hi = 299;
  d.detail = "what the engine reported";
  outcome.first = d;

  const PropertyOutcome back = round_trip(outcome);
  EXPECT_EQ(back.pass, false);
  EXPECT_EQ(back.report, outcome.report);
  EXPECT_EQ(back.rows_compared, 7);
  EXPECT_EQ(back.rows_unjudged, 2);
  ASSERT_TRUE(back.signature);
  EXPECT_EQ(to_string(*back.signature), to_string(*outcome.signature));
  ASSERT_TRUE(back.first);
  const Divergence& b = *back.first;
  EXPECT_EQ(b.kind, d.kind);
  EXPECT_EQ(b.key, d.key);
  EXPECT_EQ(b.origin.op, 4);
  EXPECT_EQ(b.origin.chunk, 5);
  EXPECT_EQ(b.origin.token, 6);
  EXPECT_EQ(b.q_head, 3);
  EXPECT_EQ(b.dim, 9);
  EXPECT_EQ(bits(b.got), bits(d.got));
  EXPECT_EQ(bits(b.expected), bits(d.expected));
  EXPECT_EQ(bits(b.error), bits(d.error));
  EXPECT_EQ(bits(b.bound), bits(d.bound));
  EXPECT_EQ(b.key_lo, 10);
  EXPECT_EQ(b.key_hi, 299);
  EXPECT_EQ(b.detail, d.detail);
  EXPECT_EQ(b.site, ModelSite::none);
  EXPECT_EQ(b.layer, -1);
}

TEST(OutcomeCodec, AModelDivergenceKeepsItsSiteLayerAndTopLogits) {
  PropertyOutcome outcome;
  outcome.pass = false;
  outcome.signature = FailureSignature{Property::prefix, FailureKind::mismatch};
  Divergence d;
  d.site = ModelSite::attention;
  d.layer = 2;
  d.q_head = 1;
  d.dim = 4;
  d.key_lo = 0;
  d.key_hi = -1;
  d.top_got = {{5, 2.5}, {0, -std::numeric_limits<double>::infinity()}};
  d.top_expected = {{3, 0.1}};
  outcome.first = d;

  const PropertyOutcome back = round_trip(outcome);
  ASSERT_TRUE(back.first);
  EXPECT_EQ(back.first->site, ModelSite::attention);
  EXPECT_EQ(back.first->layer, 2);
  EXPECT_EQ(back.first->q_head, 1);
  EXPECT_EQ(back.first->top_got, d.top_got);
  EXPECT_EQ(back.first->top_expected, d.top_expected);
  EXPECT_LT(back.first->key_hi, back.first->key_lo);
}

TEST(OutcomeCodec, APassingOutcomeHasNoDivergence) {
  PropertyOutcome outcome;
  outcome.report = "prefix: pass\n";
  const PropertyOutcome back = round_trip(outcome);
  EXPECT_TRUE(back.pass);
  EXPECT_FALSE(back.signature);
  EXPECT_FALSE(back.first);
  EXPECT_EQ(back.report, outcome.report);
}

}  // namespace
}  // namespace kvfuzz
