// The long-context mode (GeneratorOptions::long_context, `kvfuzz check --max-tokens` above
// 160): contexts really reach the length asked for, within the mode's small layouts, with
// windows and long decode runs far from position 0; honest engines pass such scenarios and
// a mutant fails them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {
namespace {

GeneratorOptions long_options(int max_tokens) {
  GeneratorOptions options;
  options.long_context = LongContextOptions{max_tokens};
  return options;
}

// The longest run of decode steps (every chunk one token: an append or a batched step).
int longest_decode_run(const Scenario& s) {
  int best = 0, run = 0;
  for (const Op& op : s.program) {
    const std::vector<Chunk> chunks = op.batch();
    const bool decode =
        !chunks.empty() && std::all_of(chunks.begin(), chunks.end(),
                                       [](const Chunk& c) { return c.tokens.size() == 1; });
    run = decode ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}

TEST(LongContext, ContextsReachTheLengthAskedForWithinTheSmallLayouts) {
  constexpr int kMaxTokens = 8192;
  constexpr int kSeeds = 200;
  int near_max = 0, over_half = 0, longest = 0, far_windows = 0, long_runs = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource c(seed);
    const Scenario s = generate_scenario(c, long_options(kMaxTokens));
    ASSERT_LE(s.sequences, 2) << seed;
    ASSERT_LE(s.layout.q_heads, 4) << seed;
    ASSERT_LE(s.layout.head_dim, 16) << seed;
    ASSERT_LE(s.layout.value_dim, 16) << seed;
    const int context = max_epoch_length(s);
    ASSERT_LE(context, kMaxTokens) << seed;
    longest = std::max(longest, context);
    near_max += context >= kMaxTokens * 9 / 10;
    over_half += context >= kMaxTokens / 2;
    far_windows += s.layout.window.value_or(0) >= 1024;
    long_runs += longest_decode_run(s) >= 1000;
  }
  std::printf(
      "of %d long scenarios: %d reach 90%% of %d tokens, %d half of it, longest %d; "
      "%d windows of 1024 or more, %d decode runs of 1000 or more\n",
      kSeeds, near_max, kMaxTokens, over_half, longest, far_windows, long_runs);
  EXPECT_GE(longest, kMaxTokens * 99 / 100);
  EXPECT_GE(near_max, kSeeds / 8);
  EXPECT_GE(over_half, kSeeds / 3);
  EXPECT_GE(far_windows, kSeeds / 20);
  EXPECT_GE(long_runs, kSeeds / 20);
}

TEST(LongContext, TheDefaultSizesStopFarBelow) {
  // What the mode is for: without it, no context passes the default maximum (160).
  int longest = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    PrngChoiceSource c(seed);
    longest = std::max(longest, max_epoch_length(generate_scenario(c)));
  }
  EXPECT_LE(longest, GeneratorOptions{}.max_epoch_tokens);
}

TEST(LongContext, HonestEnginesPassAndAMutantFails) {
  // 2048 tokens keep the double reference and the sanitizer build quick.
  int mutant_rejected = 0, judged = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    PrngChoiceSource c(seed);
    const Scenario s = generate_scenario(c, long_options(2048));
    if (max_epoch_length(s) < 256) continue;
    ++judged;
    const Prepared prepared = prepare(s);
    for (const char* honest : {"contiguous", "paged", "flash"}) {
      const CheckOutcome outcome = judge_engine(s, prepared, *find_engine(honest));
      EXPECT_TRUE(outcome.verdict.pass) << honest << " on seed " << seed;
    }
    mutant_rejected += !judge_engine(s, prepared, *find_engine("mask-origin")).verdict.pass;
  }
  ASSERT_GE(judged, 2);
  EXPECT_GE(mutant_rejected, 1);
}

}  // namespace
}  // namespace kvfuzz
