// The scenario shrinker: it reaches the known minimum of the worked example, does so from
// random failing scenarios, shrinks every mutant's failure to a small fixture, never trades
// the failure for another kind, honours its time budget; and `kvfuzz shrink` saves the raw
// fixture first and a canonical result that replays as failing only on the mutant.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "command.h"
#include "forwarding_engine.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"
#include "shrink/measure.h"
#include "shrink/moves.h"
#include "shrink/search.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;

using test::engine;

int tokens_of(const Scenario& s) {
  int total = 0;
  for (const Op& op : s.program) {
    for (const Chunk& chunk : op.batch()) total += static_cast<int>(chunk.tokens.size());
  }
  return total;
}

bool zero_scores(const Scenario& s) {
  const auto* table = std::get_if<std::vector<ExplicitToken>>(&s.tokens);
  if (table == nullptr) return std::get<GeneratedTokens>(s.tokens).zero_scores;
  for (const ExplicitToken& t : *table) {
    for (const auto* heads : {&t.q, &t.k}) {
      for (const auto& head : *heads) {
        for (double x : head) {
          if (x != 0) return false;
        }
      }
    }
  }
  return true;
}

// Program tokens, then ops.
std::pair<int, int> shrink_size(const Scenario& s) {
  return {tokens_of(s), static_cast<int>(s.program.size())};
}

std::string summary(const Scenario& s) {
  return write_fixture(s);
}

// The known minimum of a mask-origin failure: one sequence, one head of one dim, zero
// scores, one cached token and then a one-token chunk, as two appends. Nothing else set.
void expect_mask_origin_minimum(const Scenario& s) {
  EXPECT_EQ(s.sequences, 1) << summary(s);
  EXPECT_EQ(s.layout.q_heads, 1);
  EXPECT_EQ(s.layout.kv_heads, 1);
  EXPECT_EQ(s.layout.head_dim, 1);
  EXPECT_EQ(s.layout.value_dim, 1);
  EXPECT_FALSE(s.layout.rope_theta || s.layout.window || s.layout.scale);
  EXPECT_EQ(s.layout.dtype, DType::f32);
  EXPECT_TRUE(zero_scores(s)) << summary(s);
  EXPECT_EQ(token_count(s.tokens), 2);
  EXPECT_EQ(s.program, (std::vector<Op>{Op::append(0, {0}), Op::append(0, {1})})) << summary(s);
  EXPECT_EQ(s.placement, Placement{});
  EXPECT_TRUE(s.expect.empty());
}

bool is_mask_origin_minimum(const Scenario& s) {
  return s.sequences == 1 && s.layout.q_heads == 1 && s.layout.kv_heads == 1 &&
         s.layout.head_dim == 1 && s.layout.value_dim == 1 && !s.layout.window && zero_scores(s) &&
         token_count(s.tokens) == 2 &&
         s.program == std::vector<Op>{Op::append(0, {0}), Op::append(0, {1})};
}

// The mutant also ignores the window (its mask is [0, r] whatever the layout says), so a
// windowed failure has a smaller minimum still, one op where the other has two: window 1
// and one chunk of two tokens, whose second row sees key 0 beyond the edge. The shrinker
// reaches it since it cuts inside a window and shrinks the window with the cut.
bool is_mask_origin_window_minimum(const Scenario& s) {
  return s.sequences == 1 && s.layout.q_heads == 1 && s.layout.kv_heads == 1 &&
         s.layout.head_dim == 1 && s.layout.value_dim == 1 && s.layout.window == 1 &&
         zero_scores(s) && token_count(s.tokens) == 2 &&
         s.program == std::vector<Op>{Op::append(0, {0, 1})};
}

TEST(Shrink, WorkedExampleShrinksToTheKnownMinimum) {
  Scenario s = test::worked_example();
  s.expect = {{0, 0, 3, {{7.5}}}, {0, 0, 4, {{12.4}}}};
  const auto result = shrink(s, engine("mask-origin"), {});
  ASSERT_TRUE(result);
  EXPECT_FALSE(result->timed_out);
  EXPECT_EQ(to_string(result->signature), "prefix/mismatch");
  expect_mask_origin_minimum(result->scenario);
  // The values: 0 cached, then 1: the row at position 1 sees only 0 instead of (0 + 1) / 2.
  const auto& table = std::get<std::vector<ExplicitToken>>(result->scenario.tokens);
  EXPECT_EQ(table[0].v, (std::vector<std::vector<double>>{{0}}));
  EXPECT_EQ(table[1].v, (std::vector<std::vector<double>>{{1}}));
  EXPECT_FALSE(result->outcome.pass);
  EXPECT_GT(result->accepted, 0);
  EXPECT_GE(result->tried, result->accepted);
}

TEST(Shrink, IsDeterministicAndReportsProgressAfterEachAcceptance) {
  const Scenario s = test::worked_example();
  int calls = 0, last_accepted = 0;
  ShrinkOptions options;
  options.on_progress = [&](const ShrinkProgress& p) {
    ++calls;
    EXPECT_EQ(p.accepted, last_accepted + 1);
    last_accepted = p.accepted;
    ASSERT_NE(p.best, nullptr);
    EXPECT_FALSE(judge_property(Property::prefix, *p.best, engine("mask-origin")).pass);
  };
  const auto first = shrink(s, engine("mask-origin"), options);
  const auto second = shrink(s, engine("mask-origin"), {});
  ASSERT_TRUE(first && second);
  EXPECT_EQ(calls, first->accepted);
  EXPECT_EQ(first->scenario, second->scenario);
  EXPECT_EQ(first->tried, second->tried);
}

TEST(Shrink, APassingScenarioHasNothingToShrink) {
  EXPECT_FALSE(shrink(test::worked_example(), engine("paged"), {}));
}

// shrink_with: the caller judges (a campaign's target in another process). Here the
// "failure" is "the program truncates a sequence that holds tokens": the minimum keeps one
// append and one truncate, and every step of the way the judge said yes.
TEST(ShrinkWith, ReachesTheMinimumOfTheCallersJudgement) {
  const auto truncates_a_nonempty_sequence = [](const Scenario& s) {
    std::map<int, int64_t> length;
    for (const Op& op : s.program) {
      for (const Chunk& chunk : op.batch()) length[chunk.seq] += std::ssize(chunk.tokens);
      if (op.kind == OpKind::reset) length[op.seq] = 0;
      if (op.kind == OpKind::truncate && length[op.seq] > op.keep) return true;
      if (op.kind == OpKind::truncate) length[op.seq] = op.keep;
      if (op.kind == OpKind::fork) length[op.seq] = length[op.src];
    }
    return false;
  };
  int found = 0;
  for (uint64_t seed = 1; seed < 400 && found < 3; ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario s = generate_scenario(choices);
    if (!truncates_a_nonempty_sequence(s)) continue;
    ++found;
    int judged = 0;
    const auto result = shrink_with(s,
                                    [&](const Scenario& c) {
                                      ++judged;
                                      return truncates_a_nonempty_sequence(c);
                                    },
                                    {});
    ASSERT_TRUE(result) << seed;
    EXPECT_TRUE(truncates_a_nonempty_sequence(result->scenario));
    EXPECT_EQ(result->scenario.program.size(), 2u) << write_fixture(result->scenario);
    EXPECT_EQ(result->scenario.program[1].kind, OpKind::truncate);
    EXPECT_EQ(result->scenario.program[1].keep, 0);
    EXPECT_GT(result->accepted, 0);
    EXPECT_EQ(result->tried + 1, judged);  // the input once, then every candidate
  }
  EXPECT_EQ(found, 3);
  // Nothing to shrink when the judge says the input does not fail.
  EXPECT_FALSE(shrink_with(test::worked_example(), truncates_a_nonempty_sequence, {}));
}

// ---- Model level: the model's own moves, and no move that invents token data. ----

// A model scenario with something to shrink everywhere: three layers, wide, a large
// vocabulary with ids out of first-use order, GQA with RoPE, a window, bf16, two sequences,
// every kind of op, a reversed pool with spare pages and a finite poison.
Scenario big_model_scenario() {
  Scenario s;
  s.name = "big-model";
  s.layout.q_heads = 4;
  s.layout.kv_heads = 2;
  s.layout.head_dim = 8;
  s.layout.value_dim = 6;
  s.layout.page_size = 4;
  s.layout.dtype = DType::bf16;
  s.layout.rope_theta = 10000.0;
  s.layout.window = 5;
  s.layout.scale = 0.5;
  s.model = ModelConfig{48, 32, 3, 64, 9};
  s.tokens = GeneratedTokens{0, 48, Distribution::small_int, false};
  s.sequences = 2;
  s.program = {Op::append(0, {17, 5, 30, 5}),
               Op::step({Chunk{0, {9, 22}}, Chunk{1, {3, 12, 3}}}),
               Op::truncate(0, 2),
               Op::fork(1, 0),
               Op::append(1, {8, 39}),
               Op::reset(1),
               Op::append(0, {1, 2, 0})};
  s.placement.order = PageOrder::reversed;
  s.placement.pool_pages = 12;
  s.placement.poison = Poison::huge;
  return s;
}

TEST(ShrinkModel, EveryCandidateIsSmallerAndKeepsTheVocabularyIds) {
  std::vector<Scenario> bases = {big_model_scenario()};
  GeneratorOptions options;
  options.model = ModelOptions{};
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    PrngChoiceSource choices(seed);
    bases.push_back(generate_scenario(choices, options));
  }
  std::map<std::string, int> valid_model_moves;
  for (const Scenario& base : bases) {
    ASSERT_FALSE(validate(base)) << summary(base);
    const shrinking::Measure size = shrinking::measure(base);
    for (const shrinking::Move& move : shrinking::moves()) {
      for (int index = 0;; ++index) {
        Scenario candidate;
        const shrinking::Made made = move.make(base, index, candidate);
        if (made == shrinking::Made::end) break;
        if (made == shrinking::Made::skip) continue;
        SCOPED_TRACE(std::string(move.name) + " #" + std::to_string(index) + "\n" + summary(base));
        ASSERT_TRUE(candidate.model);
        // Never a token table: the token source stays the canonical one of its vocabulary.
        EXPECT_EQ(candidate.tokens, TokenSource(GeneratedTokens{0, candidate.model->vocab,
                                                                Distribution::small_int, false}));
        EXPECT_EQ(candidate.model->seed, base.model->seed);
        EXPECT_LT(shrinking::measure(candidate), size);
        const bool model_move = move.name == "smaller model" || move.name == "smaller vocabulary" ||
                                move.name == "merge vocabulary ids";
        if (model_move) {
          const auto error = validate(candidate);
          EXPECT_FALSE(error) << error->path << ": expected " << error->message;
          ++valid_model_moves[std::string(move.name)];
        }
      }
    }
  }
  // Each model move had something to do.
  EXPECT_GT(valid_model_moves["smaller model"], 40);
  EXPECT_GT(valid_model_moves["smaller vocabulary"], 5);
  EXPECT_GT(valid_model_moves["merge vocabulary ids"], 10);
}

TEST(ShrinkModel, TheModelMovesOfTheBigScenario) {
  const Scenario base = big_model_scenario();
  const auto candidates = [&](std::string_view name) {
    std::vector<Scenario> out;
    for (const shrinking::Move& move : shrinking::moves()) {
      if (move.name != name) continue;
      for (int index = 0;; ++index) {
        Scenario candidate;
        const shrinking::Made made = move.make(base, index, candidate);
        if (made == shrinking::Made::end) break;
        if (made == shrinking::Made::candidate) out.push_back(std::move(candidate));
      }
    }
    return out;
  };
  std::vector<std::tuple<int, int, int>> sizes;  // layers, width, ffn
  for (const Scenario& c : candidates("smaller model")) {
    sizes.emplace_back(c.model->layers, c.model->width, c.model->ffn);
  }
  EXPECT_EQ(sizes, (std::vector<std::tuple<int, int, int>>{{1, 32, 64},
                                                           {2, 32, 64},
                                                           {3, 1, 64},
                                                           {3, 16, 64},
                                                           {3, 31, 64},
                                                           {3, 32, 1},
                                                           {3, 32, 32},
                                                           {3, 32, 63}}));
  // The vocabulary: down to the largest id used + 1, then renumbered in first-use order.
  const std::vector<Scenario> vocab = candidates("smaller vocabulary");
  ASSERT_EQ(vocab.size(), 2u);
  EXPECT_EQ(vocab[0].model->vocab, 40);  // 39 is the largest id used
  EXPECT_EQ(vocab[0].program, base.program);
  EXPECT_EQ(vocab[1].model->vocab, 12);  // 12 distinct ids
  EXPECT_EQ(vocab[1].program[0].tokens, (std::vector<int>{0, 1, 2, 1}));
  EXPECT_EQ(vocab[1].program[1].chunks[1].tokens, (std::vector<int>{5, 6, 5}));
  EXPECT_EQ(vocab[1].program[6].tokens, (std::vector<int>{9, 10, 11}));
  // Merging: the second word used (5) becomes the first (17).
  const std::vector<Scenario> merged = candidates("merge vocabulary ids");
  ASSERT_EQ(merged.size(), 11u);
  EXPECT_EQ(merged[0].program[0].tokens, (std::vector<int>{17, 17, 30, 17}));
  // Layout moves keep the token source (no materialised q/k/v), and without token data
  // each layout is tried once.
  for (std::string_view name : {"fewer heads", "smaller head_dim", "smaller value_dim"}) {
    const std::vector<Scenario> layouts = candidates(name);
    EXPECT_FALSE(layouts.empty()) << name;
    std::set<std::tuple<int, int, int, int>> shapes;
    for (const Scenario& c : layouts) {
      EXPECT_EQ(c.tokens, base.tokens) << name;
      EXPECT_FALSE(validate(c)) << name << "\n" << summary(c);
      const Layout& l = c.layout;
      EXPECT_TRUE(shapes.emplace(l.q_heads, l.kv_heads, l.head_dim, l.value_dim).second) << name;
    }
  }
  std::vector<int> head_dims;
  for (const Scenario& c : candidates("smaller head_dim")) head_dims.push_back(c.layout.head_dim);
  EXPECT_EQ(head_dims, (std::vector<int>{1, 4, 7}));
  EXPECT_TRUE(candidates("compact tokens").empty());
}

TEST(ShrinkModel, ShrinkWithReachesTheExactMinimum) {
  const auto fails = [](const Scenario& s) {
    if (!s.model || s.model->layers < 2 || s.model->width < 4) return false;
    for (const Op& op : s.program) {
      for (const Chunk& chunk : op.batch()) {
        if (std::find(chunk.tokens.begin(), chunk.tokens.end(), 3) != chunk.tokens.end())
          return true;
      }
    }
    return false;
  };
  const Scenario big = big_model_scenario();
  const auto result = shrink_with(big, fails, {});
  ASSERT_TRUE(result);
  EXPECT_FALSE(result->timed_out);
  Scenario minimum;
  minimum.name = big.name;
  minimum.model = ModelConfig{4, 4, 2, 1, 9};  // id 3 needs a vocabulary of 4
  minimum.tokens = GeneratedTokens{0, 4, Distribution::small_int, false};
  minimum.program = {Op::append(0, {3})};
  EXPECT_EQ(result->scenario, minimum) << write_fixture(result->scenario);
  EXPECT_FALSE(validate(result->scenario));
  // And again from a canonical fixture of the result: nothing left to shrink.
  const auto again =
      shrink_with(parse_fixture(write_fixture(result->scenario), "m.json"), fails, {});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->accepted, 0);
}

// Draws scenarios from the generator, seed after seed, until one fails `engine`.
std::optional<Scenario> first_failing(const EngineInfo& info, uint64_t& seed, int max_draws) {
  for (int draw = 0; draw < max_draws; ++draw, ++seed) {
    PrngChoiceSource choices(seed);
    Scenario s = generate_scenario(choices);
    if (!judge_property(Property::prefix, s, info).pass) return s;
  }
  return std::nullopt;
}

// The first hand-written seed fixture that fails `engine` (for mutants of ops that the
// generator does not reach often).
std::optional<Scenario> failing_seed_fixture(const EngineInfo& info) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    Scenario s = load_fixture(file);
    if (!judge_property(Property::prefix, s, info).pass) return s;
  }
  return std::nullopt;
}

TEST(Shrink, RandomMaskOriginFailuresShrinkToTheKnownMinimum) {
  const EngineInfo& mutant = engine("mask-origin");
  uint64_t seed = 1;
  int minimal = 0, windowed = 0;
  std::string misses;
  for (int i = 0; i < 20; ++i) {
    const auto failing = first_failing(mutant, seed, 200);
    ASSERT_TRUE(failing) << "no failing scenario near seed " << seed;
    const uint64_t this_seed = seed++;
    const auto result = shrink(*failing, mutant, {});
    ASSERT_TRUE(result);
    EXPECT_FALSE(result->timed_out) << "seed " << this_seed;
    if (is_mask_origin_minimum(result->scenario)) {
      ++minimal;
    } else if (is_mask_origin_window_minimum(result->scenario)) {
      ++minimal;
      ++windowed;
    } else {
      misses += "seed " + std::to_string(this_seed) + ":\n" + summary(result->scenario);
    }
    // Whatever happens, the result is the shape of the worked example.
    EXPECT_EQ(result->scenario.sequences, 1) << this_seed;
    EXPECT_EQ(result->scenario.layout.q_heads, 1) << this_seed;
    EXPECT_EQ(result->scenario.layout.head_dim, 1) << this_seed;
    EXPECT_LE(tokens_of(result->scenario), 5) << this_seed;
  }
  std::printf(
      "mask-origin: %d of 20 random failures shrank to a known minimum (%d to the windowed "
      "one)\n",
      minimal, windowed);
  EXPECT_GE(minimal, 19) << misses;
  EXPECT_GT(windowed, 0);  // the generator's windows: some failures keep theirs
}

// What each mutant's failure shrinks to, at most: the bug's own minimum.
struct Bound {
  int tokens;
  int sequences;
  int q_heads;
  int kv_heads;
  int head_dim = 1;
  int value_dim = 1;  // 32 where a ggml block format of V must stay
};

// Every mutant in the registry needs a row here, so a new mutant states its bound. These
// are the bugs' own minima (measured: every mutant reaches them from the generator's seeds).
const std::map<std::string, Bound>& bounds() {
  static const std::map<std::string, Bound> table = {
      // one cached token, then a one-token chunk that sees only key 0
      {"mask-origin", {2, 1, 1, 1}},
      // a token, reset, a token: reported at position 1 / seeing the old key
      {"stale-position", {2, 1, 1, 1}},
      {"stale-kv", {2, 1, 1, 1}},
      // one one-token decode: it reads the poisoned tail of its page
      {"page-tail-read", {1, 1, 1, 1}},
      // q head h reads kv head h % kv instead of h / group: the first layout where they
      // differ is 4 q heads over 2 kv heads (h = 1: 1 instead of 0)
      {"wrong-kv-head", {1, 1, 4, 2}},
      // a token, truncate to 0, a token: reported at position 1
      {"truncate-keeps-position", {2, 1, 1, 1}},
      // a token, fork to sequence 1, a token there: reported at position 0
      {"fork-restarts-positions", {2, 2, 1, 1}},
      // two tokens filling a page, fork, roll one side back into that page, a token on
      // the other side: it reads the poison the rollback left in the shared page
      {"truncate-shared-in-place", {3, 2, 1, 1}},
      // a decode at the split threshold (32 keys: partitions of 16 and 16) whose second
      // partition's max exceeds the first's past ln(FLT_MAX). Measured: 32 tokens, but
      // head_dim stays 4 (cutting a dimension loses the spread: no move concentrates it).
      {"split-merge-first-max", {32, 1, 1, 1, 4}},
      // a batched decode of a row at the threshold (32 keys) and a row of 16 keys, one
      // partition short of it, would be 48 tokens; measured 65 (no move shortens a context
      // to the edge while keeping it).
      {"split-edge-nan", {65, 2, 1, 1}},
      // one token on a page (or slot) past the index's width, handed out first
      {"block-table-u8", {1, 1, 1, 1}},
      {"slot-offset-u16", {1, 1, 1, 1}},
      {"slot-mapping-i16", {1, 1, 1, 1}},
      // its minimum is 3 tokens (window 2 on pages of 1: two tokens, then a decode whose
      // window starts at 1); from the generator's seed the shrinker stops at 7 (window 6):
      // no move shortens the window together with the context
      {"window-evicts-early", {7, 1, 1, 1}},
      // a token, reset, two tokens on pages of 1: the second takes the stale page the
      // first was written into again
      {"reset-keeps-block-table", {3, 1, 1, 1}},
      // a token, fork into a partial page, a token on one side, whose slot the other side
      // also reads
      {"fork-shares-partial-page", {2, 2, 1, 1}},
      // a prefill of two tokens: thread 1 scores the key thread 0 loaded, with no barrier
      // between (the race check names it even at head_dim 1, where thread order reads it
      // right)
      {"cuda-missing-tile-sync", {2, 1, 1, 1}},
      // a decode at 33 keys (two splits of 32) whose window leaves the first split empty
      {"cuda-empty-split-unwritten", {33, 1, 1, 1}},
      // a decode over 17 keys: the first split past one half warp's 16 lanes
      {"cuda-half-warp-reduce", {17, 1, 1, 1}},
      // one token: its decode reads the slot after it
      {"cuda-split-bound-past-length", {1, 1, 1, 1}},
      {"cuda-offset-32bit", {1, 1, 1, 1}},
      // a token, then a decode over two keys: thread 1 reads the page id thread 0 staged
      {"cuda-race-unsynced-pages", {2, 1, 1, 1}},
      // one token: its decode meets the staging barrier at two call sites
      {"cuda-barrier-per-branch", {1, 1, 1, 1}},
      // one token: lane 1 of the merge reads the total lane 0 wrote
      {"cuda-race-merge-no-syncwarp", {1, 1, 1, 1}},
      // The attention features (from their seeds: the generator's default options draw
      // none). A decode that sees the split threshold's 32 keys, its own included, under a
      // soft cap: capped twice there.
      {"softcap-twice-split", {32, 1, 1, 1}},
      // one token decoded alone: its row without the sink is v, with it v / (1 + e^sink)
      {"sink-prefill-only", {1, 1, 1, 1}},
      // two q heads on one kv head, two tokens: the second head biases key 0 by the first's
      // slope
      {"alibi-kv-head-slope", {2, 1, 2, 1}},
      // a token, truncate keeping it (a new request that continues at 1), a token at
      // position 1 off a chunk boundary: its chunk counted from 1 leaves key 0 out
      {"chunked-local-from-request", {2, 1, 1, 1}},
      // The quantized KV caches (from their seeds). One token whose V, stored in fp8 at a
      // scale other than 1, is read back without it.
      {"fp8-v-scale-dropped", {1, 1, 1, 1}},
      // one token whose V row is one q4_0 block (value_dim 32, which the format needs)
      {"q4_0-nibbles-swapped", {1, 1, 1, 1, 1, 32}},
      // one token whose V row is one affine group of 32 (the smallest group)
      {"affine-pack-high-first", {1, 1, 1, 1, 1, 32}},
      // one token whose key row is [latent; another element]: the value read from the end
      {"mla-value-at-key-end", {1, 1, 1, 1, 2, 1}},
      // two tokens (position 0 turns nothing) whose key rows are turned in other pairs:
      // head_dim 4, the least where the two styles' pairs differ
      {"rope-interleaved-as-half-split", {2, 1, 1, 1, 4, 1}},
      // two tokens whose key rows turn the other part: head_dim 4 (a part of 2, the least,
      // and 2 elements it leaves)
      {"rope-part-at-front", {2, 1, 1, 1, 4, 1}},
  };
  return table;
}

TEST(Shrink, EveryMutantShrinksSmall) {
  for (const EngineInfo& info : engine_registry()) {
    if (!info.mutant) continue;
    SCOPED_TRACE(info.name);
    const auto bound = bounds().find(info.name);
    ASSERT_NE(bound, bounds().end()) << "state the shrunk size of mutant " << info.name;
    uint64_t seed = 1;
    auto failing = first_failing(info, seed, 100);
    const bool from_seed = failing.has_value();
    if (!failing) failing = failing_seed_fixture(info);
    ASSERT_TRUE(failing) << "neither the generator nor a seed fixture exposes " << info.name;
    const auto start = std::chrono::steady_clock::now();
    ShrinkOptions unbounded;  // sizes, not speed: no budget to run out on a slow machine
    unbounded.time_budget_seconds = 1e9;
    const auto result = shrink(*failing, info, unbounded);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(result);
    const Scenario& s = result->scenario;
    const std::string from = from_seed ? "seed " + std::to_string(seed) : "a seed fixture";
    std::printf(
        "%-24s %-15s %-22s %d ops/%d tokens -> %d ops/%d tokens, %d seq, heads %d/%d, "
        "head_dim %d, %d/%d accepted (%d seen), %.2f s\n",
        info.name.c_str(), from.c_str(), to_string(result->signature).c_str(),
        static_cast<int>(failing->program.size()), tokens_of(*failing),
        static_cast<int>(s.program.size()), tokens_of(s), s.sequences, s.layout.q_heads,
        s.layout.kv_heads, s.layout.head_dim, result->accepted, result->tried, result->skipped_seen,
        seconds);
    EXPECT_FALSE(result->timed_out);
    EXPECT_LE(tokens_of(s), bound->second.tokens) << summary(s);
    EXPECT_LE(s.sequences, bound->second.sequences) << summary(s);
    EXPECT_EQ(s.layout.q_heads, bound->second.q_heads) << summary(s);
    EXPECT_EQ(s.layout.kv_heads, bound->second.kv_heads) << summary(s);
    EXPECT_LE(s.layout.head_dim, bound->second.head_dim) << summary(s);
    EXPECT_EQ(s.layout.value_dim, bound->second.value_dim) << summary(s);
    EXPECT_TRUE(s.expect.empty());
    EXPECT_FALSE(validate(s));
    EXPECT_FALSE(judge_property(Property::prefix, s, info).pass);
    for (const EngineInfo& honest : engine_registry()) {
      if (honest.mutant) continue;
      // An engine that lacks the shrunk fixture's attention feature refuses it.
      if ((s.layout.has_features() || s.layout.quantized_kv()) &&
          honest.name.rfind("cuda-", 0) == 0) {
        continue;
      }
      EXPECT_TRUE(judge_property(Property::prefix, s, honest).pass) << honest.name;
    }
  }
}

// An honest engine made wrong in two ways that depend on the chunk: a chunk of three or
// more tokens gets a NaN in its third row (not_finite); a chunk of exactly two tokens gets
// its second row off by one (mismatch).
class TwoFacedEngine final : public Engine {
 public:
  explicit TwoFacedEngine(const EngineConfig& config)
      : inner_(engine("contiguous").make(config)),
        row_(static_cast<size_t>(config.layout.q_heads) * config.layout.value_dim) {}
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    inner_->step(chunks, outs);
    for (size_t c = 0; c < chunks.size(); ++c) {
      auto& out = outs[c].out;
      if (chunks[c].tokens >= 3) out[2 * row_] = std::numeric_limits<float>::quiet_NaN();
      if (chunks[c].tokens == 2) out[row_] += 1.0f;
    }
  }
  void reset(int seq) override { inner_->reset(seq); }

 private:
  std::unique_ptr<Engine> inner_;
  size_t row_;
};

// The attention features a failure does not need are shrunk away, one move each, and a
// sink it needs is kept with its value (a sink of 0 still weighs e^0 = 1).
TEST(Shrink, FeaturesTheFailureDoesNotNeedAreRemoved) {
  Scenario s = load_fixture(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds/worked-example-sink.json");
  s.layout.softcap = 50.0;
  s.layout.alibi = {0.0};
  s.layout.chunked_local = 100;
  const EngineInfo& mutant = engine("sink-prefill-only");
  ASSERT_FALSE(judge_property(Property::prefix, s, mutant).pass);
  const auto result = shrink(s, mutant, ShrinkOptions{});
  ASSERT_TRUE(result);
  const Layout& l = result->scenario.layout;
  EXPECT_FALSE(l.softcap.has_value());
  EXPECT_TRUE(l.alibi.empty());
  EXPECT_FALSE(l.chunked_local.has_value());
  ASSERT_EQ(l.sinks.size(), 1u);
  EXPECT_EQ(tokens_of(result->scenario), 1);
  const auto& counts = result->moves;
  const auto features = std::find_if(counts.begin(), counts.end(), [](const MoveCounts& c) {
    return c.move == "fewer attention features";
  });
  ASSERT_NE(features, counts.end());
  EXPECT_GE(features->accepted, 3);
}

// An affine group wider than the failure needs narrows to 32 (the measure counts wide groups),
// and the rows with it.
TEST(Shrink, AnAffineGroupNarrowsTo32) {
  Scenario s = load_fixture(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds/affine-pack-order.json");
  s.expect.clear();
  s.layout.value_dim = 128;
  s.layout.v_format.group = 128;
  for (ExplicitToken& t : std::get<std::vector<ExplicitToken>>(s.tokens)) {
    for (auto& head : t.v) head.resize(128, 0.0);
  }
  ASSERT_FALSE(validate(s));
  const EngineInfo& mutant = engine("affine-pack-high-first");
  ASSERT_FALSE(judge_property(Property::prefix, s, mutant).pass);
  const auto result = shrink(s, mutant, ShrinkOptions{});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->scenario.layout.v_format.group, 32);
  EXPECT_EQ(result->scenario.layout.value_dim, 32);
}

TEST(Shrink, NeverAcceptsACandidateThatFailsAnotherWay) {
  const EngineInfo two_faced{"two-faced", "test engine", true, [](const EngineConfig& config) {
                               return std::make_unique<TwoFacedEngine>(config);
                             }};
  Scenario s = test::worked_example();
  s.program = {Op::append(0, {0, 1, 2, 3})};
  // Dropping a token would leave a two-token chunk: a failure, but of another kind.
  Scenario two = s;
  two.program = {Op::append(0, {0, 1})};
  const PropertyOutcome other = judge_property(Property::prefix, two, two_faced);
  ASSERT_TRUE(other.signature);
  EXPECT_EQ(other.signature->kind, FailureKind::mismatch);

  const auto result = shrink(s, two_faced, {});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->signature.kind, FailureKind::not_finite);
  ASSERT_TRUE(result->outcome.signature);
  EXPECT_EQ(result->outcome.signature->kind, FailureKind::not_finite);
  // It still shrank what it could (a token and the values), but kept a three-token chunk.
  EXPECT_EQ(tokens_of(result->scenario), 3) << summary(result->scenario);
  EXPECT_GT(result->tried, result->accepted);
}

TEST(Shrink, ABudgetOfZeroReturnsTheInputUnchanged) {
  const Scenario s = test::worked_example();
  ShrinkOptions options;
  options.time_budget_seconds = 0;
  const auto result = shrink(s, engine("mask-origin"), options);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->scenario, s);
  EXPECT_EQ(result->accepted, 0);
  EXPECT_EQ(result->tried, 0);
  EXPECT_EQ(to_string(result->signature), "prefix/mismatch");
  EXPECT_FALSE(result->outcome.pass);
}

TEST(Shrink, ABudgetStopsALongShrinkWithTheBestSoFar) {
  // A long failing program (143 ops, 289 tokens at seed 2). The progress callback stalls
  // past the budget, so the search stops right after its first acceptance, whatever the
  // machine's speed.
  const EngineInfo& mutant = engine("stale-position");
  uint64_t seed = 1;
  const auto failing = first_failing(mutant, seed, 100);
  ASSERT_TRUE(failing);
  ShrinkOptions options;
  // Generous against slow (sanitizer) builds: the first acceptance comes long before 2 s.
  options.time_budget_seconds = 2;
  options.on_progress = [](const ShrinkProgress&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  };
  const auto result = shrink(*failing, mutant, options);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->accepted, 1);
  EXPECT_LT(shrink_size(result->scenario), shrink_size(*failing));
  const PropertyOutcome outcome = judge_property(Property::prefix, result->scenario, mutant);
  ASSERT_TRUE(outcome.signature);
  EXPECT_EQ(*outcome.signature, result->signature);
}

// ---------------------------------------------------------------------------------------
// The command.

using CommandRun = kvfuzz::test::CommandResult;
using kvfuzz::test::slurp;

CommandRun kvfuzz(const std::string& args, const fs::path& /*dir*/) {
  return kvfuzz::test::run_kvfuzz(args);
}

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  return files;
}

class ShrinkCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvfuzz-shrink-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

const std::string kWorkedExample =
    std::string(KVFUZZ_SOURCE_DIR) + "/corpus/seeds/worked-example.json";

TEST_F(ShrinkCommand, SavesTheRawFixtureFirstThenACanonicalMinimalResult) {
  const fs::path out = dir_ / "out";
  const CommandRun r = kvfuzz("shrink " + kWorkedExample + " --engine mask-origin --out " +
                                  out.string() + " --raw " + (out / "raw").string(),
                              dir_);
  ASSERT_EQ(r.status, 1) << r.out << r.err;

  // The raw fixture, announced on stderr before any progress: the input as it failed.
  const auto raw_files = json_files(out / "raw");
  ASSERT_EQ(raw_files.size(), 1u);
  EXPECT_EQ(r.err.rfind("shrink: saved the raw failing fixture to ", 0), 0u) << r.err;
  const std::string raw_text = slurp(raw_files[0]);
  const Scenario raw = parse_fixture(raw_text, raw_files[0].string());
  EXPECT_EQ(write_fixture(raw), raw_text);
  EXPECT_EQ(raw.program, test::worked_example().program);
  EXPECT_EQ(raw.provenance.source, "shrink");
  EXPECT_EQ(raw.provenance.engine, "mask-origin");
  EXPECT_EQ(raw.provenance.property, "prefix");
  ASSERT_TRUE(raw.provenance.failure);
  EXPECT_EQ(raw.provenance.failure->rfind("mismatch at seq 0 epoch 0 pos 3", 0), 0u)
      << *raw.provenance.failure;
  std::string version = kvfuzz("--version", dir_).out;
  version.erase(version.find_last_not_of(" \n") + 1);
  EXPECT_EQ(raw.provenance.kvfuzz_version, version);

  // The result: canonical, minimal, named by engine, property, kind and hash.
  const auto files = json_files(out);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("mask-origin-prefix-mismatch-", 0), 0u) << files[0];
  const std::string text = slurp(files[0]);
  const Scenario shrunk = parse_fixture(text, files[0].string());
  EXPECT_EQ(write_fixture(shrunk), text);
  EXPECT_EQ(shrunk.name, files[0].stem().string());
  expect_mask_origin_minimum(shrunk);
  EXPECT_EQ(shrunk.provenance.source, "shrink");
  EXPECT_EQ(shrunk.provenance.engine, "mask-origin");
  EXPECT_NE(shrunk.note.find("from 2 ops, 5 tokens to 2 ops, 2 tokens"), std::string::npos)
      << shrunk.note;
  EXPECT_NE(r.out.find("mismatch at seq 0 epoch 0 pos 1"), std::string::npos) << r.out;

  // It replays as failing on the mutant and passing on every honest engine.
  const CommandRun on_mutant =
      kvfuzz("replay " + files[0].string() + " --engine mask-origin", dir_);
  EXPECT_EQ(on_mutant.status, 1) << on_mutant.out << on_mutant.err;
  const CommandRun on_honest = kvfuzz("replay " + files[0].string(), dir_);
  EXPECT_EQ(on_honest.status, 0) << on_honest.out << on_honest.err;
}

// Progress lines name the move that was accepted; the summary ends with a per-move table
// whose totals are the summary's: "A of C candidates accepted", C = tried + seen.
TEST_F(ShrinkCommand, NamesTheMovesAndCountsCandidatesPerMove) {
  const CommandRun r = kvfuzz("shrink " + kWorkedExample + " --engine mask-origin --out " +
                                  dir_.string() + " --raw " + (dir_ / "raw").string(),
                              dir_);
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  std::set<std::string> names;
  for (const shrinking::Move& move : shrinking::moves()) names.emplace(move.name);
  std::istringstream err(r.err);
  std::string line;
  int progress_lines = 0;
  while (std::getline(err, line)) {
    if (line.find(" accepted, ") == std::string::npos) continue;
    ++progress_lines;
    ASSERT_EQ(line.back(), ')') << line;
    const std::string move = line.substr(line.rfind('(') + 1, line.size() - line.rfind('(') - 2);
    EXPECT_TRUE(names.count(move)) << line;
    EXPECT_NE(line.find(" seen, "), std::string::npos) << line;
  }
  EXPECT_GE(progress_lines, 1) << r.err;

  int accepted = 0, candidates = 0;
  const size_t summary = r.out.find(" candidates accepted");
  ASSERT_NE(summary, std::string::npos) << r.out;
  const size_t open = r.out.rfind('(', summary);
  ASSERT_EQ(std::sscanf(r.out.c_str() + open, "(%d of %d", &accepted, &candidates), 2) << r.out;
  const size_t table = r.out.find("candidates by move");
  ASSERT_NE(table, std::string::npos) << r.out;
  std::istringstream rows(r.out.substr(table));
  std::getline(rows, line);  // the title
  std::getline(rows, line);  // the column names
  EXPECT_NE(line.find("tried"), std::string::npos) << line;
  int sum_tried = 0, sum_accepted = 0, sum_seen = 0;
  while (std::getline(rows, line)) {
    int tried = 0, row_accepted = 0, seen = 0;
    const size_t numbers = line.find_first_of("0123456789");
    ASSERT_NE(numbers, std::string::npos) << line;
    ASSERT_EQ(std::sscanf(line.c_str() + numbers, "%d %d %d", &tried, &row_accepted, &seen), 3)
        << line;
    std::string move = line.substr(2, numbers - 2);
    move.erase(move.find_last_not_of(' ') + 1);
    if (move == "all moves") {
      EXPECT_EQ(tried, sum_tried);
      EXPECT_EQ(row_accepted, sum_accepted);
      EXPECT_EQ(seen, sum_seen);
      EXPECT_EQ(row_accepted, accepted);
      EXPECT_EQ(tried + seen, candidates);
      return;
    }
    EXPECT_TRUE(names.count(move) || move == shrinking::split_move().name) << line;
    EXPECT_GT(tried + seen, 0) << line;  // only moves that had a candidate judged or seen
    sum_tried += tried;
    sum_accepted += row_accepted;
    sum_seen += seen;
  }
  ADD_FAILURE() << "no totals row\n" << r.out;
}

TEST_F(ShrinkCommand, APassingFixtureHasNothingToShrink) {
  const CommandRun r =
      kvfuzz("shrink " + kWorkedExample + " --engine paged --out " + dir_.string(), dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("nothing to shrink: the fixture passes"), std::string::npos) << r.out;
  EXPECT_TRUE(json_files(dir_).empty());
}

TEST_F(ShrinkCommand, BadInputIsOneLineAndExitTwo) {
  for (const std::string& args :
       {std::string("shrink /nonexistent.json --engine mask-origin"),
        "shrink " + kWorkedExample + " --engine no-such-engine",
        "shrink " + kWorkedExample + " --engine mask-origin --property nope",
        "shrink " + kWorkedExample + " --engine mask-origin --time -1",
        "shrink " + kWorkedExample}) {
    const CommandRun r = kvfuzz(args + " --out " + dir_.string(), dir_);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  }
}

TEST_F(ShrinkCommand, TimeZeroSavesTheInputAsTheResult) {
  const CommandRun r = kvfuzz("shrink " + kWorkedExample + " --engine mask-origin --time 0 --out " +
                                  dir_.string() + " --raw " + (dir_ / "raw").string(),
                              dir_);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("stopped at the time budget"), std::string::npos) << r.out;
  const auto files = json_files(dir_);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(load_fixture(files[0]).program, test::worked_example().program);
}

}  // namespace
}  // namespace kvfuzz

namespace kvfuzz {
namespace {

// mask-origin, declaring one head size for q, k and v in multiples of 4 (as ONNX Runtime's
// kernels do): the shrinker must stay inside those supports, or replay would skip the
// shrunk fixture as saying nothing about the engine.
TEST(Shrink, StaysInsideTheEnginesDeclaredSupports) {
  const EngineInfo narrow =
      test::with_one_head_size(engine("mask-origin"), "mask-origin-one-head-size");
  GeneratorOptions options;
  options.supports = probe_declarations(narrow).supports;
  int shrunk = 0;
  for (uint64_t seed = 1; seed <= 40 && shrunk < 3; ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario failing = generate_scenario(choices, options);
    if (judge_property(Property::prefix, failing, narrow).pass) continue;
    const auto result = shrink(failing, narrow, {});
    ASSERT_TRUE(result) << seed;
    const Layout& l = result->scenario.layout;
    // The smallest head size the engine takes: q, k and v cut as one.
    EXPECT_EQ(l.head_dim, 4) << summary(result->scenario);
    EXPECT_EQ(l.value_dim, l.head_dim) << summary(result->scenario);
    // Without that move a head_dim or value_dim cut alone is outside the declaration, and
    // the head size stays the generated one.
    std::vector<shrinking::Move> alone;
    for (const shrinking::Move& move : shrinking::moves()) {
      if (move.name != "smaller head size" && move.name != "head_dim cut keeping scores") {
        alone.push_back(move);
      }
    }
    const auto cut_alone = shrinking::shrink_with_moves(failing, narrow, {}, alone);
    ASSERT_TRUE(cut_alone);
    EXPECT_EQ(cut_alone->scenario.layout.head_dim, failing.layout.head_dim);
    std::printf("one head size x4: head_dim %d -> %d (%d with head_dim and value_dim cut alone)\n",
                failing.layout.head_dim, l.head_dim, cut_alone->scenario.layout.head_dim);
    EXPECT_FALSE(unjudgeable(result->scenario, probe_declarations(narrow)))
        << summary(result->scenario);
    // Without the declaration the same failure shrinks to head_dim 1 (so the filter is
    // what kept it at 4).
    const auto free = shrink(failing, engine("mask-origin"), {});
    ASSERT_TRUE(free);
    EXPECT_EQ(free->scenario.layout.head_dim, 1) << summary(free->scenario);
    ++shrunk;
  }
  EXPECT_EQ(shrunk, 3);
}

}  // namespace
}  // namespace kvfuzz
