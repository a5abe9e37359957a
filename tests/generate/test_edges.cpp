// The engine edges (EngineEdges, GeneratorOptions::edges): the defaults are the built-in
// flash engine's constants, and other edges move where generated contexts, chunks and
// windows land, and what the cache-state events count.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "cpu/flash_constants.h"
#include "generate/events.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {
namespace {

TEST(EngineEdges, TheDefaultsAreTheFlashEnginesConstants) {
  constexpr EngineEdges defaults{};
  static_assert(defaults.tile_keys == cpu::kFlashTileKeys);
  static_assert(defaults.split_threshold == cpu::kFlashSplitThreshold);
  static_assert(defaults.partition_keys == cpu::kFlashPartitionKeys);
  EXPECT_EQ(defaults.tile_keys, cpu::kFlashTileKeys);
  EXPECT_EQ(defaults.split_threshold, cpu::kFlashSplitThreshold);
  EXPECT_EQ(defaults.partition_keys, cpu::kFlashPartitionKeys);
}

TEST(EngineEdges, TheDefaultsGiveTheSameScenariosAsExplicitFlashEdges) {
  GeneratorOptions flash;
  flash.edges = {cpu::kFlashTileKeys, cpu::kFlashSplitThreshold, cpu::kFlashPartitionKeys};
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    EXPECT_EQ(generate_scenario(a), generate_scenario(b, flash)) << seed;
  }
}

// Over the same seeds: how many multi-token chunks end at (leave a context of) `edge` - 1,
// `edge` or `edge` + 1 tokens, and how many windows are one of those lengths.
struct Landings {
  int chunk_ends = 0;
  int windows = 0;
};

Landings landings_around(int edge, const GeneratorOptions& options) {
  const auto near = [edge](int64_t n) { return n >= edge - 1 && n <= edge + 1; };
  Landings hits;
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario s = generate_scenario(choices, options);
    if (s.layout.window && near(*s.layout.window)) ++hits.windows;
    for_each_chunk(s, [&](const PlacedChunk& c) {
      const auto size = static_cast<int64_t>(c.tokens->size());
      if (size >= 2 && near(c.start + size)) ++hits.chunk_ends;
    });
  }
  return hits;
}

// An engine with tiles of 20 keys, partitions of 36 and a split threshold of 100: lengths
// that neither the flash engine's edges nor the page sizes aim at. With its edges, chunks
// end around them far more often than with the flash engine's, and windows that only its
// edges can give appear.
TEST(EngineEdges, OtherEdgesMoveWhereChunksEndAndWindowsLand) {
  GeneratorOptions flash;
  flash.typical_epoch_tokens = 160;  // room for contexts past 101
  GeneratorOptions other = flash;
  other.edges = {20, 100, 36};
  for (const int edge : {20, 36, 100}) {
    const Landings with_flash = landings_around(edge, flash);
    const Landings with_other = landings_around(edge, other);
    std::printf("around %d: chunk ends %d -> %d, windows %d -> %d\n", edge, with_flash.chunk_ends,
                with_other.chunk_ends, with_flash.windows, with_other.windows);
    EXPECT_GE(with_other.chunk_ends, 150) << edge;
    EXPECT_GE(2 * with_other.chunk_ends, 3 * with_flash.chunk_ends) << edge;
    EXPECT_GE(with_other.windows, 40) << edge;
    EXPECT_EQ(with_flash.windows, 0) << edge;
  }
}

TEST(EngineEdges, EdgesBelowOneCountAsOne) {
  GeneratorOptions zero, one;
  zero.edges = {0, -4, 0};
  one.edges = {1, 1, 1};
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource a(seed), b(seed);
    EXPECT_EQ(generate_scenario(a, zero), generate_scenario(b, one)) << seed;
  }
}

TEST(EngineEdges, TheSplitPathEventCountsAgainstTheGivenThreshold) {
  Scenario s;
  s.layout.page_size = 16;
  s.tokens = GeneratedTokens{1, 64, Distribution::small_int, false};
  std::vector<int> prefill(40);
  for (int i = 0; i < 40; ++i) prefill[static_cast<size_t>(i)] = i;
  s.program = {Op::append(0, prefill), Op::append(0, {0})};  // a decode that sees 41 keys
  EXPECT_EQ(count_events(s, EngineEdges{})[Event::split_path], 1);
  EXPECT_EQ(count_events(s, EngineEdges{8, 41, 16})[Event::split_path], 1);
  EXPECT_EQ(count_events(s, EngineEdges{8, 42, 16})[Event::split_path], 0);
  EXPECT_EQ(count_events(s, EngineEdges{64, 128, 64})[Event::split_path], 0);
}

}  // namespace
}  // namespace kvfuzz
