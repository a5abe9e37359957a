// The engine registry: the honest engines first, then the mutants, each named, described
// and able to make an engine that announces truncate and fork.
#include <gtest/gtest.h>

#include "engine_tests.h"
#include "kvfuzz/engine.h"

namespace kvfuzz::test {
namespace {

TEST(Registry, HonestEnginesFirstThenMutants) {
  const std::vector<std::string> names{"contiguous",
                                       "paged",
                                       "flash",
                                       "flash-bf16",
                                       "flash-f16",
                                       "contiguous-f16acc",
                                       "flash-batch-split",
                                       "flash-fixed-split",
                                       "flash-split-bf16",
                                       "flash-f16-merge",
                                       "paged-f16-normalised",
                                       "flash-bf16-rope-tables",
                                       "cuda-paged",
                                       "cuda-paged-bf16",
                                       "mask-origin",
                                       "stale-position",
                                       "stale-kv",
                                       "page-tail-read",
                                       "wrong-kv-head",
                                       "truncate-keeps-position",
                                       "fork-restarts-positions",
                                       "truncate-shared-in-place",
                                       "split-merge-first-max",
                                       "split-edge-nan",
                                       "block-table-u8",
                                       "slot-offset-u16",
                                       "slot-mapping-i16",
                                       "window-evicts-early",
                                       "reset-keeps-block-table",
                                       "fork-shares-partial-page",
                                       "cuda-missing-tile-sync",
                                       "cuda-empty-split-unwritten",
                                       "cuda-half-warp-reduce",
                                       "cuda-split-bound-past-length",
                                       "cuda-offset-32bit",
                                       "cuda-race-unsynced-pages",
                                       "cuda-barrier-per-branch",
                                       "cuda-race-merge-no-syncwarp",
                                       "softcap-twice-split",
                                       "sink-prefill-only",
                                       "alibi-kv-head-slope",
                                       "chunked-local-from-request",
                                       "fp8-v-scale-dropped",
                                       "q4_0-nibbles-swapped",
                                       "affine-pack-high-first",
                                       "mla-value-at-key-end",
                                       "rope-interleaved-as-half-split",
                                       "rope-part-at-front"};
  const auto& registry = engine_registry();
  ASSERT_EQ(registry.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(registry[i].name, names[i]);
    EXPECT_EQ(registry[i].mutant, i >= 14) << names[i];
    EXPECT_FALSE(registry[i].description.empty());
    EXPECT_TRUE(registry[i].make);
    EXPECT_EQ(find_engine(names[i]), &registry[i]);
  }
  EXPECT_EQ(find_engine("nope"), nullptr);
}

TEST(Capabilities, EveryBuiltInEngineAnnouncesTruncateAndFork) {
  const Layout layout;
  for (const EngineInfo& info : engine_registry()) {
    const EngineCapabilities caps = info.make(config_for(layout))->capabilities();
    EXPECT_TRUE(caps.truncate) << info.name;
    EXPECT_TRUE(caps.fork) << info.name;
  }
}

}  // namespace
}  // namespace kvfuzz::test
