// The paged engines (paged, flash): neither the page order nor the poison changes any
// row, pool exhaustion is an engine error, and paged matches contiguous bit for bit.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_tests.h"

namespace kvfuzz::test {
namespace {

class PagedEngines : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Cpu, PagedEngines, ::testing::Values("paged", "flash"));

// A program over three sequences with resets, so freed pages are reused.
ChunkOut placement_run(const std::string& name, const Layout& layout, const Data& d,
                       std::vector<int> order, Poison poison) {
  auto engine = make_engine(name, config_for(layout, 3, 0, std::move(order), poison));
  ChunkOut all;
  const auto keep = [&](const std::vector<ChunkOut>& outs) {
    for (const ChunkOut& o : outs) {
      all.out.insert(all.out.end(), o.out.begin(), o.out.end());
      all.positions.insert(all.positions.end(), o.positions.begin(), o.positions.end());
    }
  };
  keep(step(*engine, d, {Feed{0, 0, 5}, Feed{1, 5, 2}}));
  keep(step(*engine, d, {Feed{1, 7, 1}, Feed{0, 8, 1}, Feed{2, 9, 4}}));
  engine->reset(0);
  keep(step(*engine, d, {Feed{0, 13, 7}}));
  keep(step(*engine, d, {Feed{0, 20, 1}, Feed{2, 21, 1}}));
  engine->reset(1);
  keep(step(*engine, d, {Feed{1, 22, 1}}));
  keep(step(*engine, d, {Feed{1, 23, 1}, Feed{0, 24, 6}}));
  for (int i = 0; i < 40; ++i) keep(step(*engine, d, {Feed{2, 30 + i, 1}}));  // split decodes
  return all;
}

TEST_P(PagedEngines, PageOrderAndPoisonDoNotChangeAnyRow) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 1,
                                       .head_dim = 2,
                                       .value_dim = 2,
                                       .page_size = 3,
                                       .dtype = dtype});
    const Data d = generated(layout, 70, 21);
    const int pages = 40;
    const ChunkOut want = placement_run(GetParam(), layout, d, identity_order(pages), Poison::nan);
    std::vector<int> reversed = identity_order(pages);
    std::reverse(reversed.begin(), reversed.end());
    std::vector<int> shuffled = identity_order(pages);
    for (size_t i = 0; i < shuffled.size(); ++i) {
      std::swap(shuffled[i], shuffled[(i * 7 + 3) % shuffled.size()]);
    }
    for (const auto& order : {identity_order(pages), reversed, shuffled}) {
      for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
        SCOPED_TRACE(std::string(poison_name(poison)));
        expect_identical(placement_run(GetParam(), layout, d, order, poison), want);
      }
    }
  }
}

TEST_P(PagedEngines, PoolExhaustionIsAnEngineError) {
  const Data d = worked(12);
  Layout layout = d.layout;
  layout.page_size = 2;
  auto engine = make_engine(GetParam(), config_for(layout, 2, 3));
  feed(*engine, d, 0, 0, 3);  // two pages
  EXPECT_THROW(feed(*engine, d, 1, 3, 3), EngineError);
  // Nothing was taken by the failed step: one page is still free for sequence 1.
  const ChunkOut ok = feed(*engine, d, 1, 3, 2);
  EXPECT_EQ(ok.positions, (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(feed(*engine, d, 0, 5, 2), EngineError);
  // A reset gives the pages back.
  engine->reset(1);
  const ChunkOut more = feed(*engine, d, 0, 3, 3);
  EXPECT_EQ(more.positions, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_FLOAT_EQ(more.out[2], (2 + 4 + 8 + 16 + 32 + 64) / 6.0f);
  // An empty pool refuses the first token.
  auto empty = make_engine(GetParam(), config_for(layout, 1, 0));
  EXPECT_THROW(feed(*empty, d, 0, 0, 1), EngineError);
}

TEST_P(PagedEngines, PageOrderMustBeAPermutation) {
  const Layout layout;
  EXPECT_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {0, 0})), EngineError);
  EXPECT_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {0, 2})), EngineError);
  EXPECT_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {-1, 0})), EngineError);
  EXPECT_NO_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {1, 0})));
}

TEST(PagedEngine, MatchesContiguousBitForBit) {
  Layout layout = make_layout({.q_heads = 4,
                               .kv_heads = 2,
                               .head_dim = 6,
                               .value_dim = 3,
                               .page_size = 5,
                               .rope_theta = 10000.0,
                               .window = 9});
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    layout.dtype = dtype;
    const Data d = generated(layout, 30, 23, Distribution::uniform);
    auto paged = make_engine("paged", config_for(layout));
    auto contiguous = make_engine("contiguous", config_for(layout));
    expect_identical(feed_schedule(*paged, d, {7, 1, 12, 1, 9}),
                     feed_schedule(*contiguous, d, {7, 1, 12, 1, 9}));
  }
}

}  // namespace
}  // namespace kvfuzz::test
