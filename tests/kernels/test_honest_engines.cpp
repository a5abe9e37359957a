// Every honest engine (contiguous, paged, flash) on hand-derived rows (the worked example)
// and against the double-precision attention of engine_tests.h: dtypes, GQA and MQA, RoPE
// at the absolute position, sliding windows, batched steps, long contexts, and errors.
#include <gtest/gtest.h>

#include "engine_tests.h"

namespace kvfuzz::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, HonestEngine, ::testing::ValuesIn(honest_engines()));

TEST_P(HonestEngine, WorkedExample) {
  const Data d = worked();
  auto engine = make(d.layout);
  const ChunkOut cached = feed(*engine, d, 0, 0, 3);
  EXPECT_EQ(cached.positions, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_FLOAT_EQ(cached.out[0], 2.0f);
  EXPECT_FLOAT_EQ(cached.out[1], 3.0f);
  EXPECT_FLOAT_EQ(cached.out[2], 14.0f / 3.0f);
  const ChunkOut chunk = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(chunk.positions, (std::vector<int64_t>{3, 4}));
  EXPECT_FLOAT_EQ(chunk.out[0], 7.5f);
  EXPECT_FLOAT_EQ(chunk.out[1], 12.4f);
}

TEST_P(HonestEngine, OneTokenCacheThenChunk) {
  const Data d = worked();
  auto engine = make(d.layout);
  feed(*engine, d, 0, 0, 1);
  const ChunkOut one = feed(*engine, d, 0, 1, 1);
  EXPECT_EQ(one.positions, (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(one.out[0], 3.0f);
  const ChunkOut two = feed(*engine, d, 0, 2, 2);
  EXPECT_EQ(two.positions, (std::vector<int64_t>{2, 3}));
  EXPECT_FLOAT_EQ(two.out[0], 14.0f / 3.0f);
  EXPECT_FLOAT_EQ(two.out[1], 7.5f);
}

TEST_P(HonestEngine, EmptyChunkGivesNoRows) {
  const Data d = worked();
  auto engine = make(d.layout);
  const ChunkOut none = feed(*engine, d, 0, 0, 0);
  EXPECT_TRUE(none.out.empty());
  EXPECT_TRUE(none.positions.empty());
  EXPECT_EQ(feed(*engine, d, 0, 0, 1).positions, (std::vector<int64_t>{0}));
}

TEST_P(HonestEngine, HalfPrecisionStorage) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 2,
                                       .head_dim = 4,
                                       .value_dim = 2,
                                       .page_size = 4,
                                       .dtype = dtype});
    const Data d = generated(layout, 12, 11, Distribution::uniform);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {5, 1, 6});
    expect_rows_near(got, attention(d, 0, 12), 0, 1e-5, d);
  }
  // Exact data: the worked example survives f16 and bf16 storage exactly.
  for (DType dtype : {DType::f16, DType::bf16}) {
    Data d = worked();
    d.layout.dtype = dtype;
    auto engine = make(d.layout);
    feed(*engine, d, 0, 0, 3);
    const ChunkOut chunk = feed(*engine, d, 0, 3, 2);
    EXPECT_EQ(chunk.out[0], 7.5f);
    EXPECT_EQ(chunk.out[1], 12.4f);
  }
}

TEST_P(HonestEngine, GroupedAndMultiQueryHeads) {
  for (int kv_heads : {2, 1}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
    const Layout layout = make_layout(
        {.q_heads = 4, .kv_heads = kv_heads, .head_dim = 4, .value_dim = 3, .page_size = 5});
    const Data d = generated(layout, 17, 3);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {6, 1, 1, 9});
    expect_rows_near(got, attention(d, 0, 17), 0, 1e-5, d);
  }
}

TEST_P(HonestEngine, RopeAtTheAbsolutePosition) {
  for (int head_dim : {2, 6, 3}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 1,
                                       .head_dim = head_dim,
                                       .value_dim = 2,
                                       .page_size = 4,
                                       .rope_theta = 100.0});
    const Data d = generated(layout, 40, 5, Distribution::uniform);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {3, 1, 1, 20, 1, 1, 13});
    expect_rows_near(got, attention(d, 0, 40), 0, 1e-5, d);
  }
}

TEST_P(HonestEngine, SlidingWindow) {
  for (int window : {1, 3, 8, 40}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 2,
                                       .head_dim = 2,
                                       .value_dim = 2,
                                       .page_size = 3,
                                       .window = window});
    const Data d = generated(layout, 50, 9);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {4, 1, 1, 10, 1, 33});
    expect_rows_near(got, attention(d, 0, 50), 0, 1e-5, d);
  }
}

TEST_P(HonestEngine, BatchedStepOfTwoSequences) {
  const Layout layout = make_layout({.q_heads = 2,
                                     .kv_heads = 1,
                                     .head_dim = 4,
                                     .value_dim = 2,
                                     .page_size = 2,
                                     .rope_theta = 10000.0});
  const Data d = generated(layout, 20, 13);
  auto engine = make(layout, 3);
  // Sequence 0 holds tokens 0..5, sequence 2 tokens 6..19.
  const auto first = step(*engine, d, {Feed{0, 0, 3}, Feed{2, 6, 7}});
  const auto second = step(*engine, d, {Feed{2, 13, 1}, Feed{0, 3, 1}});
  const auto third = step(*engine, d, {Feed{0, 4, 2}, Feed{2, 14, 6}});
  ChunkOut a = first[0], b = first[1];
  for (const ChunkOut* o : {&second[1], &third[0]}) {
    a.out.insert(a.out.end(), o->out.begin(), o->out.end());
    a.positions.insert(a.positions.end(), o->positions.begin(), o->positions.end());
  }
  for (const ChunkOut* o : {&second[0], &third[1]}) {
    b.out.insert(b.out.end(), o->out.begin(), o->out.end());
    b.positions.insert(b.positions.end(), o->positions.begin(), o->positions.end());
  }
  expect_rows_near(a, attention(d, 0, 6), 0, 1e-5, d);
  expect_rows_near(b, attention(d, 6, 14), 0, 1e-5, d);
  // Batch invariance: alone, each sequence gives the same bits.
  auto alone = make(layout, 3);
  expect_identical(feed_schedule(*alone, d, {3, 1, 2}), a);
}

TEST_P(HonestEngine, LongContextMatchesDouble) {
  const Layout layout = long_context_layout();
  const Data d = generated(layout, 300, 17, Distribution::uniform);
  auto engine = make(layout);
  const ChunkOut got = feed_schedule(*engine, d, {100, 1, 1, 150, 1, 47});
  expect_rows_near(got, attention(d, 0, 300), 0, 1e-5, d);
}

TEST_P(HonestEngine, ErrorsAreEngineErrors) {
  const Data d = worked();
  auto engine = make(d.layout, 2);
  EXPECT_THROW(feed(*engine, d, 2, 0, 1), EngineError);
  EXPECT_THROW(feed(*engine, d, -1, 0, 1), EngineError);
  EXPECT_THROW(engine->reset(2), EngineError);
  EXPECT_THROW(step(*engine, d, {Feed{0, 0, 1}, Feed{0, 1, 1}}), EngineError);
  ChunkIn bad = chunk_of(d, Feed{0, 0, 2});
  bad.tokens = 3;  // spans hold 2 tokens
  std::vector<ChunkOut> outs(1);
  EXPECT_THROW(engine->step(std::span<const ChunkIn>(&bad, 1), outs), EngineError);
  std::vector<ChunkOut> no_outs;
  const ChunkIn ok = chunk_of(d, Feed{0, 0, 1});
  EXPECT_THROW(engine->step(std::span<const ChunkIn>(&ok, 1), no_outs), EngineError);
  // The engine is still usable and nothing was stored by the failed calls.
  const ChunkOut first = feed(*engine, d, 0, 0, 1);
  EXPECT_EQ(first.positions, (std::vector<int64_t>{0}));
  EXPECT_FLOAT_EQ(first.out[0], 2.0f);

  Layout bad_layout = d.layout;
  bad_layout.q_heads = 3;
  bad_layout.kv_heads = 2;
  EXPECT_THROW(make(bad_layout), EngineError);
  EXPECT_THROW(make(d.layout, 0), EngineError);
}

}  // namespace
}  // namespace kvfuzz::test
