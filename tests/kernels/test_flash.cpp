// The flash engine's dispatch: prefill, single-pass decode and split decode around the
// split threshold, each matching the paged engine and the double-precision attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cpu/flash_constants.h"
#include "cpu/flash_engine.h"
#include "engine_tests.h"

namespace kvfuzz::test {
namespace {

TEST(FlashEngine, SplitDecodeRunsAndMatchesPaged) {
  const Layout layout = long_context_layout();
  const Data d = generated(layout, 110, 29, Distribution::uniform);
  cpu::FlashEngine flash(config_for(layout));
  auto paged = make_engine("paged", config_for(layout));
  std::vector<int> schedule{99};
  for (int i = 0; i < 11; ++i) schedule.push_back(1);  // contexts 100..110
  const ChunkOut f = feed_schedule(flash, d, schedule);
  const ChunkOut p = feed_schedule(*paged, d, schedule);
  EXPECT_EQ(flash.path_counts().split_decode, 11 * layout.q_heads);
  EXPECT_EQ(flash.path_counts().decode, 0);
  EXPECT_EQ(flash.path_counts().prefill, 99 * layout.q_heads);
  ASSERT_EQ(f.positions, p.positions);
  for (size_t i = 0; i < f.out.size(); ++i) {
    EXPECT_NEAR(f.out[i], p.out[i], 1e-5 * std::max(1.0f, std::fabs(p.out[i]))) << i;
  }
  expect_rows_near(f, attention(d, 0, 110), 0, 1e-5, d);
}

TEST(FlashEngine, DispatchAroundTheSplitThreshold) {
  Layout layout = make_layout({.head_dim = 2, .page_size = 4});
  const int n = cpu::kFlashSplitThreshold + 1;
  const Data d = generated(layout, n, 31);
  cpu::FlashEngine flash(config_for(layout));
  // Prefill threshold - 2 tokens, then decodes that see threshold - 1, threshold, threshold + 1.
  const ChunkOut got = feed_schedule(flash, d, {n - 3, 1, 1, 1});
  EXPECT_EQ(flash.path_counts().prefill, n - 3);
  EXPECT_EQ(flash.path_counts().decode, 1);        // sees threshold - 1 keys
  EXPECT_EQ(flash.path_counts().split_decode, 2);  // sees threshold, threshold + 1
  expect_rows_near(got, attention(d, 0, n), 0, 1e-5, d);

  // A window below the threshold keeps long decodes on the single pass.
  layout.window = cpu::kFlashSplitThreshold - 1;
  const Data w = generated(layout, 80, 33);
  cpu::FlashEngine windowed(config_for(layout));
  const ChunkOut wgot = feed_schedule(windowed, w, {70, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(windowed.path_counts().split_decode, 0);
  EXPECT_EQ(windowed.path_counts().decode, 10);
  expect_rows_near(wgot, attention(w, 0, 80), 0, 1e-5, w);
}

// A batched decode over rows of 40 and 10 keys. By the row's own context the short row
// takes one pass; by the batch's longest it splits into 3 partitions of 16, two of them
// empty; 4 fixed splits of ceil(40 / 4) = 10 keys rounded up to 16 leave the long row one
// empty partition and the short row three. Every row stays right.
TEST(FlashEngine, SplitCountFixedByTheBatchGivesEmptyPartitions) {
  const Layout layout = make_layout({.q_heads = 2, .kv_heads = 1, .head_dim = 4, .page_size = 8});
  const Data d = generated(layout, 52, 41, Distribution::uniform);
  struct Case {
    cpu::SplitCount count;
    int64_t split_rows, empty;
  };
  for (const Case c :
       {Case{cpu::SplitCount::own_context, 2, 0}, Case{cpu::SplitCount::batch_longest, 4, 4},
        Case{cpu::SplitCount::fixed, 4, 8}}) {
    SCOPED_TRACE(static_cast<int>(c.count));
    cpu::FlashEngine flash(config_for(layout, 2), {.count = c.count});
    step(flash, d, {{0, 0, 39}, {1, 40, 9}});
    const std::vector<ChunkOut> outs = step(flash, d, {{0, 39, 1}, {1, 49, 1}});
    EXPECT_EQ(flash.path_counts().split_decode, c.split_rows);  // per q head
    EXPECT_EQ(flash.empty_partitions(), c.empty);
    expect_rows_near(outs[0], attention(d, 0, 40), 39, 1e-5, d);
    expect_rows_near(outs[1], attention(d, 40, 10), 9, 1e-5, d);
    // Alone, the short row is below the threshold whatever fixes the count.
    const ChunkOut alone = feed(flash, d, 1, 50, 1);
    EXPECT_EQ(flash.path_counts().split_decode, c.split_rows);
    expect_rows_near(alone, attention(d, 40, 11), 10, 1e-5, d);
  }
}

// Claims: a split count fixed by the batch keeps layout and poison bit for bit, not batch.
TEST(FlashEngine, BatchWideSplitCountsDoNotClaimBatchInvariance) {
  const Layout layout = make_layout({});
  for (const char* name : {"flash-batch-split", "flash-fixed-split"}) {
    const BitwiseClaims claims = make_engine(name, config_for(layout))->bitwise_claims();
    EXPECT_EQ(claims,
              (BitwiseClaims{.batch = false, .schedule = false, .layout = true, .poison = true}))
        << name;
  }
}

}  // namespace
}  // namespace kvfuzz::test
