// Cache-state events counted by hand on small programs.
#include <gtest/gtest.h>

#include <numeric>

#include "generate/events.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {
namespace {

// The default engine edges: the built-in flash engine's.
constexpr EngineEdges kEdges{};

std::vector<int> ids(int count) {
  std::vector<int> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

Scenario with_program(std::vector<Op> program, int page_size = 4, int sequences = 1) {
  Scenario s;
  s.layout.page_size = page_size;
  s.sequences = sequences;
  s.tokens = GeneratedTokens{1, 64, Distribution::small_int, false};
  s.program = std::move(program);
  return s;
}

TEST(Events, PagesAndDecodes) {
  // Page 4: a 6-token prefill (positions 0..5) crosses into page 1 and straddles; decodes at
  // 6, 7 and 8: the one at 8 opens page 2.
  const EventCounts e = count_events(with_program({Op::append(0, ids(6)), Op::append(0, {6}),
                                                   Op::append(0, {7}), Op::append(0, {8})}),
                                     kEdges);
  EXPECT_EQ(e[Event::page_boundary_crossing], 2);
  EXPECT_EQ(e[Event::chunk_straddles_page], 1);
  EXPECT_EQ(e[Event::decode_after_prefill], 3);
  EXPECT_EQ(e[Event::reset_nonempty], 0);
  EXPECT_EQ(e[Event::window_slide], 0);
  EXPECT_EQ(e[Event::split_path], 0);
}

TEST(Events, AChunkEndingOnABoundaryDoesNotStraddle) {
  const EventCounts e =
      count_events(with_program({Op::append(0, ids(4)), Op::append(0, ids(4))}), kEdges);
  EXPECT_EQ(e[Event::chunk_straddles_page], 0);
  EXPECT_EQ(e[Event::page_boundary_crossing], 1);  // the second chunk starts page 1
  EXPECT_EQ(e[Event::decode_after_prefill], 0);
}

TEST(Events, Resets) {
  const EventCounts e =
      count_events(with_program({Op::reset(0), Op::append(0, ids(2)), Op::reset(0), Op::reset(0),
                                 Op::append(0, ids(3))}),
                   kEdges);
  EXPECT_EQ(e[Event::reset_nonempty], 1);     // the first and third resets end empty epochs
  EXPECT_EQ(e[Event::reuse_after_reset], 2);  // both appends come after a reset
}

TEST(Events, WindowSlide) {
  Scenario s = with_program({Op::append(0, ids(5))});
  s.layout.window = 3;
  EXPECT_EQ(count_events(s, kEdges)[Event::window_slide], 2);  // rows 3 and 4
}

TEST(Events, SplitPathNeedsADecodeThatSeesTheThreshold) {
  std::vector<Op> program = {Op::append(0, ids(kEdges.split_threshold - 2)), Op::append(0, {0})};
  EXPECT_EQ(count_events(with_program(program, 16), kEdges)[Event::split_path],
            0);  // sees threshold-1
  program.push_back(Op::append(0, {1}));
  EXPECT_EQ(count_events(with_program(program, 16), kEdges)[Event::split_path], 1);
  Scenario windowed = with_program(program, 16);
  windowed.layout.window = kEdges.split_threshold - 1;  // the window caps what it sees
  EXPECT_EQ(count_events(windowed, kEdges)[Event::split_path], 0);
}

TEST(Events, BatchWithMixedPrefixLengths) {
  const EventCounts e = count_events(
      with_program({Op::step({{0, {1, 2}}, {1, {3, 4}}}), Op::step({{0, {5}}, {1, {6}}}),
                    Op::append(0, {7}), Op::step({{0, {8}}, {1, {9}}})},
                   4, 2),
      kEdges);
  EXPECT_EQ(e[Event::batch_mixed_prefix], 1);  // only the last step: seq 0 at 4, seq 1 at 3
}

TEST(Events, NamesAreDistinct) {
  for (int i = 0; i < kEventCount; ++i) {
    for (int j = i + 1; j < kEventCount; ++j) {
      EXPECT_NE(event_name(static_cast<Event>(i)), event_name(static_cast<Event>(j)));
    }
  }
}

}  // namespace
}  // namespace kvfuzz
