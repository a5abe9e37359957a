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

}  // namespace
}  // namespace kvfuzz::test
