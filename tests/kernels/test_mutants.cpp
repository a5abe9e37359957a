// Every mutant, directly on the engine: each gives its predicted wrong answer on the
// matching scenario, and the honest one where its bug cannot show.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_tests.h"

namespace kvfuzz::test {
namespace {

TEST(Mutant, MaskOriginRestartsAtTheChunk) {
  const Data d = worked();
  auto engine = make_engine("mask-origin", config_for(d.layout));
  feed(*engine, d, 0, 0, 3);
  const ChunkOut chunk = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(chunk.positions, (std::vector<int64_t>{3, 4}));  // positions stay right
  EXPECT_FLOAT_EQ(chunk.out[0], 2.0f);                       // instead of 7.5
  EXPECT_FLOAT_EQ(chunk.out[1], 3.0f);                       // instead of 12.4

  auto one = make_engine("mask-origin", config_for(d.layout));
  feed(*one, d, 0, 0, 1);
  const ChunkOut decode = feed(*one, d, 0, 1, 1);
  EXPECT_EQ(decode.positions, (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(decode.out[0], 2.0f);  // instead of 3
}

TEST(Mutant, StalePositionContinuesAfterReset) {
  const Data d = worked();
  auto engine = make_engine("stale-position", config_for(d.layout));
  feed(*engine, d, 0, 0, 3);  // request A: n_A = 3
  engine->reset(0);
  const ChunkOut b = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(b.positions, (std::vector<int64_t>{3, 4}));  // instead of 0, 1
  EXPECT_FLOAT_EQ(b.out[0], 16.0f);                      // values are unaffected
  EXPECT_FLOAT_EQ(b.out[1], 24.0f);
}

TEST(Mutant, StaleKvAttendsToTheOldRequest) {
  const Data d = worked();
  auto engine = make_engine("stale-kv", config_for(d.layout));
  feed(*engine, d, 0, 0, 3);  // request A: 2, 4, 8
  engine->reset(0);
  const ChunkOut b = feed(*engine, d, 0, 3, 2);  // request B: 16, 32
  EXPECT_EQ(b.positions, (std::vector<int64_t>{0, 1}));
  EXPECT_FLOAT_EQ(b.out[0], (2 + 4 + 8 + 16) / 4.0f);       // (sum A + vB0) / (n_A + 1)
  EXPECT_FLOAT_EQ(b.out[1], (2 + 4 + 8 + 16 + 32) / 5.0f);  // instead of 16 and 24
}

TEST(Mutant, PageTailReadSeesThePoison) {
  const Data d = worked(8);
  Layout layout = d.layout;
  layout.page_size = 4;
  auto engine = make_engine("page-tail-read", config_for(layout));
  const ChunkOut prefill = feed(*engine, d, 0, 0, 2);  // prefill stays right
  EXPECT_FLOAT_EQ(prefill.out[1], 3.0f);
  const ChunkOut decode = feed(*engine, d, 0, 2, 1);  // slot 3 of page 0 still poisoned
  EXPECT_TRUE(std::isnan(decode.out[0]));
  // With huge poison the row is huge instead of 14/3.
  auto huge = make_engine("page-tail-read", config_for(layout, 1, 64, {}, Poison::huge));
  feed(*huge, d, 0, 0, 2);
  EXPECT_GT(feed(*huge, d, 0, 2, 1).out[0], 1e30f);
  // A decode that fills its page exactly reads no tail: the same as honest.
  const ChunkOut full = feed(*engine, d, 0, 3, 1);
  EXPECT_FLOAT_EQ(full.out[0], 7.5f);
}

TEST(Mutant, WrongKvHeadSwapsHeadsUnderGqa) {
  const Layout layout = make_layout({.q_heads = 4, .kv_heads = 2});
  Data d{layout, 2, {}, {}, {}};
  for (float t : {0.0f, 1.0f}) {
    d.q.insert(d.q.end(), {0, 0, 0, 0});
    d.k.insert(d.k.end(), {0, 0});
    d.v.insert(d.v.end(), {1.0f + t, 10.0f + t});  // kv head 0: 1, 2; kv head 1: 10, 11
  }
  auto honest = make_engine("flash", config_for(layout));
  auto mutant = make_engine("wrong-kv-head", config_for(layout));
  const ChunkOut want = feed(*honest, d, 0, 0, 2);
  const ChunkOut got = feed(*mutant, d, 0, 0, 2);
  EXPECT_EQ(want.out, (std::vector<float>{1, 1, 10, 10, 1.5f, 1.5f, 10.5f, 10.5f}));
  EXPECT_EQ(got.out, (std::vector<float>{1, 10, 1, 10, 1.5f, 10.5f, 1.5f, 10.5f}));
  EXPECT_EQ(got.out[1], want.out[2]);  // q head 1 gets what q head 2 should get

  // MHA and MQA: the mapping coincides, the mutant is honest there.
  for (int kv_heads : {4, 1}) {
    Layout l = layout;
    l.kv_heads = kv_heads;
    l.head_dim = 2;
    const Data g = generated(l, 9, 37);
    auto a = make_engine("flash", config_for(l));
    auto b = make_engine("wrong-kv-head", config_for(l));
    expect_identical(feed_schedule(*a, g, {5, 1, 3}), feed_schedule(*b, g, {5, 1, 3}));
  }
}

TEST(Mutant, TruncateKeepsPositionReportsTheOldLength) {
  const Data d = worked(6);
  auto engine = make_engine("truncate-keeps-position", config_for(d.layout));
  feed(*engine, d, 0, 0, 5);  // 2, 4, 8, 16, 32
  engine->truncate(0, 2);     // keep 2, 4
  const ChunkOut next = feed(*engine, d, 0, 5, 1);
  EXPECT_EQ(next.positions, (std::vector<int64_t>{5}));  // the old length instead of 2
  EXPECT_FLOAT_EQ(next.out[0], (2 + 4 + 64) / 3.0f);     // zero scores: values unaffected
  auto honest = make_engine("contiguous", config_for(d.layout));
  feed(*honest, d, 0, 0, 5);
  honest->truncate(0, 2);
  EXPECT_EQ(feed(*honest, d, 0, 5, 1).positions, (std::vector<int64_t>{2}));

  // With RoPE the new token is also rotated at the old length: its values are wrong too.
  const Layout layout = fork_layout();
  const Data g = generated(layout, 12, 61, Distribution::uniform);
  auto mutant = make_engine("truncate-keeps-position", config_for(layout));
  feed(*mutant, g, 0, 0, 9);
  mutant->truncate(0, 4);
  const ChunkOut got = feed(*mutant, g, 0, 9, 1);
  EXPECT_EQ(got.positions, (std::vector<int64_t>{9}));
  const ChunkOut want = fresh_rows("contiguous", layout, g, joined(ids(0, 4), ids(9, 1)), 4, {1});
  double diff = 0;
  for (size_t i = 0; i < got.out.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got.out[i] - want.out[i])));
  }
  EXPECT_GT(diff, 1e-2);
}

TEST(Mutant, ForkRestartsPositionsReportsTheChildFromZero) {
  for (int page_size : {4, 2}) {  // the source's pages: one partial / one full + one partial
    SCOPED_TRACE("page size " + std::to_string(page_size));
    Data d = worked(6);
    d.layout.page_size = page_size;
    auto engine = make_engine("fork-restarts-positions", config_for(d.layout, 2));
    feed(*engine, d, 0, 0, 3);  // 2, 4, 8
    engine->fork(0, 1);
    const ChunkOut child = feed(*engine, d, 1, 3, 2);          // 16, 32
    EXPECT_EQ(child.positions, (std::vector<int64_t>{0, 1}));  // instead of 3, 4
    EXPECT_FLOAT_EQ(child.out[0], 16.0f);                      // instead of 7.5
    EXPECT_FLOAT_EQ(child.out[1], 24.0f);                      // instead of 12.4
    // The parent is untouched: its next token sees 2, 4, 8 and itself.
    const ChunkOut parent = feed(*engine, d, 0, 5, 1);  // 64
    EXPECT_EQ(parent.positions, (std::vector<int64_t>{3}));
    EXPECT_FLOAT_EQ(parent.out[0], (2 + 4 + 8 + 64) / 4.0f);
  }
}

// One head, head_dim 1, 33 keys: the split path's partitions [0, 16), [16, 32), [32].
// q = 1 and k_j = a_j: the score of key j is its a_j (scale 1). Values v_j = j + 1.
Data split_data(float later_score) {
  Layout layout = make_layout({});
  layout.scale = 1.0;
  Data d{layout, 33, {}, {}, {}};
  for (int j = 0; j < 33; ++j) {
    d.q.push_back(1);
    d.k.push_back(j == 20 ? later_score : 0.0f);  // key 20, in the second partition
    d.v.push_back(static_cast<float>(j + 1));
  }
  return d;
}

TEST(Mutant, SplitMergeFirstMaxOverflowsOnlyPastExpRange) {
  for (float score : {10.0f, 80.0f, 100.0f}) {
    SCOPED_TRACE(score);
    const Data d = split_data(score);
    auto honest = make_engine("flash", config_for(d.layout));
    auto mutant = make_engine("split-merge-first-max", config_for(d.layout));
    feed(*honest, d, 0, 0, 32);
    feed(*mutant, d, 0, 0, 32);
    const float want = feed(*honest, d, 0, 32, 1).out[0];  // the split path: 33 keys
    const float got = feed(*mutant, d, 0, 32, 1).out[0];
    // (21 e^score + the other 32 values, 540) / (e^score + 32): 20.994 for 10, 21 in f32 beyond.
    const double e = std::exp(static_cast<double>(score));
    EXPECT_NEAR(want, (21 * e + 540) / (e + 32), 1e-4);
    if (score < 88) {
      EXPECT_NEAR(got, want, 1e-5f);  // exp(m_p - m_0) = e^score is finite: right
    } else {
      EXPECT_TRUE(std::isnan(got)) << got;  // e^100 = inf: inf / inf
    }
  }
}

TEST(Mutant, SplitEdgeNanFailsARowEndingOnAPartitionEdge) {
  const Layout layout = make_layout({.head_dim = 2, .page_size = 4});
  const Data d = generated(layout, 60, 43);
  // Batches of a 40-key row (3 partitions of 16) and a row of 15, 16 or 17 keys: only 16
  // keys leave an empty partition starting right after the last key.
  for (int keys : {15, 16, 17}) {
    SCOPED_TRACE(keys);
    auto mutant = make_engine("split-edge-nan", config_for(layout, 2));
    step(*mutant, d, {{0, 0, 39}, {1, 40, keys - 1}});
    const std::vector<ChunkOut> outs = step(*mutant, d, {{0, 39, 1}, {1, 40 + keys - 1, 1}});
    expect_rows_near(outs[0], attention(d, 0, 40), 39, 1e-5, d);
    if (keys == 16) {
      EXPECT_TRUE(std::isnan(outs[1].out[0]));
    } else {
      expect_rows_near(outs[1], attention(d, 40, keys), keys - 1, 1e-5, d);
    }
  }
}

}  // namespace
}  // namespace kvfuzz::test
