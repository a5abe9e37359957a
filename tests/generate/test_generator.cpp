// The one generator (kvfuzz/generator.h): every scenario is valid and passes every honest
// engine, the same choices give the same scenario, the corners it is written to reach are
// reached, scenarios stay small, and under RapidCheck the choices shrink toward simple
// scenarios.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "judge/report.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/limits.h"
#include "rc_choice_source.h"

namespace kvfuzz {
namespace {

// The default engine edges: the built-in flash engine's.
constexpr EngineEdges kEdges{};

Scenario generated(uint64_t seed, const GeneratorOptions& options = {}) {
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, options);
}

std::string why_invalid(const Scenario& s) {
  const auto error = validate(s);
  return error ? error->path + ": expected " + error->message : "";
}

TEST(Generator, FiveThousandScenariosAreValidCanonicalAndFarInsideTheLimits) {
  for (uint64_t seed = 1; seed <= 5000; ++seed) {
    const Scenario s = generated(seed);
    ASSERT_EQ(why_invalid(s), "") << "seed " << seed << "\n" << write_fixture(s);
    if (seed % 5 == 0) {  // parsing is the slow part; a fifth of them is plenty
      ASSERT_EQ(parse_fixture(write_fixture(s), "generated"), s) << "seed " << seed;
    }
    const Layout& l = s.layout;
    const int64_t tokens = program_tokens(s);
    EXPECT_LE(tokens * l.q_heads * l.value_dim, limits::kMaxRowValues / 8) << seed;
    EXPECT_LE(
        int64_t{required_pool_pages(s)} * l.page_size * l.kv_heads * (l.head_dim + l.value_dim),
        limits::kMaxPoolElements / 8)
        << seed;
    EXPECT_LE(max_epoch_length(s), 1024) << seed;
    EXPECT_LE(l.q_heads, 64) << seed;
    EXPECT_LE(l.head_dim, 128) << seed;
  }
}

TEST(Generator, HonestEnginesPassEveryTenthScenario) {
  for (uint64_t seed = 10; seed <= 5000; seed += 10) {
    const Scenario s = generated(seed);
    const Prepared prepared = prepare(s);
    for (const EngineInfo& engine : engine_registry()) {
      if (engine.mutant) continue;
      const CheckOutcome outcome = judge_engine(s, prepared, engine);
      ASSERT_TRUE(outcome.verdict.pass)
          << engine.name << ", seed " << seed << ": "
          << (outcome.verdict.first ? describe_divergence(*outcome.verdict.first) : "") << "\n"
          << write_fixture(s);
    }
  }
}

TEST(Generator, SameChoicesGiveTheSameScenario) {
  std::set<std::string> distinct;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Scenario a = generated(seed);
    const Scenario b = generated(seed);
    ASSERT_EQ(a, b) << seed;
    ASSERT_EQ(write_fixture(a), write_fixture(b)) << seed;
    distinct.insert(write_fixture(a));
  }
  EXPECT_GT(distinct.size(), 290u);  // and different seeds give different scenarios
}

// A choice source that always answers lo: the simplest scenario of all.
class LowestChoices final : public ChoiceSource {
 public:
  int64_t pick(int64_t lo, int64_t) override { return lo; }
};

TEST(Generator, TheLowestChoicesGiveTheSimplestScenario) {
  LowestChoices lowest;
  const Scenario s = generate_scenario(lowest);
  EXPECT_EQ(s.layout, (Layout{}));  // MHA, one head, head_dim 1, page 16, f32, nothing else
  EXPECT_EQ(s.sequences, 1);
  EXPECT_TRUE(s.program.empty());  // one step, which adds nothing
  const auto* tokens = std::get_if<GeneratedTokens>(&s.tokens);
  ASSERT_NE(tokens, nullptr);
  EXPECT_TRUE(tokens->zero_scores);
  EXPECT_EQ(tokens->distribution, Distribution::small_int);
  EXPECT_EQ(s.placement, (Placement{}));  // identity pages, NaN poison
}

// Which corners of the cache a scenario reaches, each counted once per scenario.
std::set<std::string> corners(const Scenario& s) {
  std::set<std::string> hit;
  const Layout& l = s.layout;
  const int group = l.group();
  if (l.kv_heads >= 2 && group >= 2) hit.insert("GQA");
  if (l.kv_heads >= 2 && group >= 3 && (group & (group - 1)) != 0) {
    hit.insert("GQA, group not a power of two");
  }
  if (l.kv_heads >= 2 && group >= 5) hit.insert("GQA, group >= 5");
  if (l.kv_heads == 1 && l.q_heads >= 2) hit.insert("MQA");
  if (l.head_dim > 8 && l.head_dim % 8 != 0) hit.insert("head_dim > 8, not a multiple of 8");
  if (l.head_dim >= 64) hit.insert("head_dim >= 64");
  if (l.value_dim != l.head_dim) hit.insert("value_dim != head_dim");
  for (int page : {1, 2, 3, 16}) {
    if (l.page_size == page) hit.insert("page size " + std::to_string(page));
  }
  if (l.rope_theta) hit.insert("RoPE");
  if (l.window) hit.insert("window");
  if (l.window && l.rope_theta) hit.insert("window with RoPE");
  hit.insert("dtype " + std::string(dtype_name(l.dtype)));
  hit.insert("poison " + std::string(poison_name(s.placement.poison)));
  switch (s.placement.order) {
    case PageOrder::identity:
      hit.insert("page order identity");
      break;
    case PageOrder::reversed:
      hit.insert("page order reversed");
      break;
    case PageOrder::explicit_list: {
      const auto pool = static_cast<int>(s.placement.pages.size());
      hit.insert(s.placement.pages == interleaved_page_order(s, pool) ? "page order interleaved"
                                                                      : "page order shuffled");
    }
  }
  if (const auto* generated = std::get_if<GeneratedTokens>(&s.tokens)) {
    if (generated->zero_scores) hit.insert("zero scores");
    if (generated->distribution == Distribution::wide) hit.insert("wide data");
    if (generated->distribution == Distribution::uniform) hit.insert("uniform data");
  } else {
    hit.insert("explicit tokens");
  }
  if (s.sequences >= 2) hit.insert("several sequences");

  // The program, replayed: per sequence its current length and whether it was reset while
  // holding tokens.
  const int page = l.page_size;
  std::vector<int64_t> length(static_cast<size_t>(s.sequences), 0);
  std::vector<bool> reset_running(static_cast<size_t>(s.sequences), false);
  int decode_run = 0;
  for (size_t o = 0; o < s.program.size(); ++o) {
    const Op& op = s.program[o];
    if (op.kind == OpKind::reset) {
      auto& n = length[static_cast<size_t>(op.seq)];
      hit.insert(n == 0 ? "reset of an empty sequence" : "reset of a running sequence");
      if (n > 0) reset_running[static_cast<size_t>(op.seq)] = true;
      for (size_t other = 0; other < length.size(); ++other) {
        if (other != static_cast<size_t>(op.seq) && length[other] > 0) {
          hit.insert("reset while another sequence runs");
        }
      }
      if (o > 0 && s.program[o - 1].kind == OpKind::reset && s.program[o - 1].seq == op.seq) {
        hit.insert("resets in a row");
      }
      n = 0;
      continue;
    }
    const std::vector<Chunk> batch = op.batch();
    std::set<int64_t> starts;
    bool all_decodes = true;
    for (const Chunk& chunk : batch) {
      auto& n = length[static_cast<size_t>(chunk.seq)];
      const auto size = static_cast<int64_t>(chunk.tokens.size());
      const int64_t start = n, end = n + size;
      starts.insert(start);
      all_decodes = all_decodes && size == 1;
      if (reset_running[static_cast<size_t>(chunk.seq)]) {
        hit.insert("reset mid-request, then reuse");
      }
      if (page >= 2 && end % page == 0) hit.insert("chunk ends on a page boundary");
      if (page >= 2 && end % page == page - 1) hit.insert("chunk ends one before a page boundary");
      if (page >= 2 && start > page && start % page == 1) {
        hit.insert("chunk starts one after a page boundary");
      }
      if (start / page != (end - 1) / page) hit.insert("chunk straddles a page boundary");
      if (size >= 32) hit.insert("chunk of >= 32 tokens");
      if (l.window && start < *l.window && end > *l.window)
        hit.insert("chunk across the window edge");
      const int64_t visible = l.window ? std::min<int64_t>(end, *l.window) : end;
      if (size == 1 && visible >= kEdges.split_threshold)
        hit.insert("decode over >= split threshold");
      if (size == 1 && visible == kEdges.split_threshold - 1) hit.insert("decode one below split");
      if (size == 1 && start > 0) hit.insert("decode after a prefill");
      n = end;
    }
    if (batch.size() >= 2) hit.insert("batched step");
    if (starts.size() >= 2) hit.insert("batched step, different cached lengths");
    decode_run = all_decodes ? decode_run + 1 : 0;
    if (decode_run >= 4) hit.insert("run of >= 4 decodes");
  }
  return hit;
}

// The corners the generator is written to reach, and how often each must show up in
// 2,000 scenarios.
const std::map<std::string, int>& required_corners() {
  static const std::map<std::string, int> required = {
      {"GQA, group not a power of two", 20},
      {"GQA, group >= 5", 10},
      {"MQA", 20},
      {"head_dim > 8, not a multiple of 8", 20},
      {"page size 1", 20},
      {"page size 3", 20},
      {"chunk ends on a page boundary", 20},
      {"chunk starts one after a page boundary", 20},
      {"chunk ends one before a page boundary", 20},
      {"decode over >= split threshold", 20},
      {"decode one below split", 10},
      {"window with RoPE", 20},
      {"chunk across the window edge", 20},
      {"poison nan", 20},
      {"poison +inf", 20},
      {"poison -inf", 20},
      {"poison huge", 20},
      {"page order identity", 20},
      {"page order reversed", 20},
      {"page order shuffled", 20},
      {"page order interleaved", 20},
      {"reset of an empty sequence", 20},
      {"reset mid-request, then reuse", 20},
      {"reset while another sequence runs", 20},
      {"resets in a row", 20},
      {"batched step, different cached lengths", 20},
      {"run of >= 4 decodes", 20},
      {"dtype f32", 20},
      {"dtype f16", 20},
      {"dtype bf16", 20},
      {"zero scores", 20},
      {"explicit tokens", 10},
      {"wide data", 20},
  };
  return required;
}

TEST(Generator, ReachesEveryCornerInTwoThousandScenarios) {
  std::map<std::string, int> counts;
  std::vector<int64_t> tokens, rows, epochs;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    const Scenario s = generated(seed);
    for (const std::string& corner : corners(s)) ++counts[corner];
    tokens.push_back(program_tokens(s));
    rows.push_back(program_tokens(s) * s.layout.q_heads);
    epochs.push_back(max_epoch_length(s));
  }
  for (const auto& [corner, n] : counts) std::printf("  %5d  %s\n", n, corner.c_str());
  for (const auto& [corner, at_least] : required_corners()) {
    EXPECT_GE(counts[corner], at_least) << corner;
  }
  // Scale: most scenarios are small (the property suites run many under ASan).
  const auto median = [](std::vector<int64_t> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const auto small = std::count_if(epochs.begin(), epochs.end(), [](int64_t n) { return n <= 64; });
  std::printf(
      "median: %lld tokens, %lld rows (x q_heads), longest epoch %lld; %ld of %zu "
      "scenarios keep every epoch <= 64 tokens\n",
      static_cast<long long>(median(tokens)), static_cast<long long>(median(rows)),
      static_cast<long long>(median(epochs)), static_cast<long>(small), epochs.size());
  EXPECT_GE(small, 1700);
  EXPECT_LE(median(tokens), 96);
}

TEST(Generator, OptionsBoundTheScenarios) {
  GeneratorOptions tiny;
  tiny.max_sequences = 1;
  tiny.max_ops = 2;
  tiny.max_epoch_tokens = 5;
  tiny.max_head_dim = 1;
  tiny.max_q_heads = 1;
  for (uint64_t seed = 1; seed <= 500; ++seed) {
    const Scenario s = generated(seed, tiny);
    ASSERT_EQ(why_invalid(s), "") << seed;
    EXPECT_EQ(s.sequences, 1);
    EXPECT_EQ(s.layout.q_heads, 1);
    EXPECT_EQ(s.layout.head_dim, 1);
    EXPECT_FALSE(s.layout.rope_theta.has_value());
    EXPECT_LE(max_epoch_length(s), 5);
  }
  GeneratorOptions large;
  large.large_one_in = 1;  // every scenario at the maxima's scale
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const Scenario s = generated(seed, large);
    ASSERT_EQ(why_invalid(s), "") << seed;
    EXPECT_LE(max_epoch_length(s), large.max_epoch_tokens);
    EXPECT_LE(s.layout.q_heads, large.max_q_heads);
    EXPECT_LE(s.layout.head_dim, large.max_head_dim);
  }
}

// An engine without truncate or fork never sees them; everything else is drawn from the
// same choices (the layout stays as it was), and leaving one out keeps the other.
TEST(Generator, LeavesOutTheOperationsAnEngineDoesNotAnnounce) {
  const auto count = [](const Scenario& s, OpKind kind) {
    return std::count_if(s.program.begin(), s.program.end(),
                         [&](const Op& op) { return op.kind == kind; });
  };
  GeneratorOptions no_truncate;
  no_truncate.truncate = false;
  GeneratorOptions no_fork;
  no_fork.fork = false;
  long truncates = 0, forks = 0, without_truncate_forks = 0, without_fork_truncates = 0;
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    const Scenario all = generated(seed);
    truncates += count(all, OpKind::truncate);
    forks += count(all, OpKind::fork);
    const Scenario a = generated(seed, no_truncate);
    ASSERT_EQ(why_invalid(a), "") << seed;
    EXPECT_EQ(count(a, OpKind::truncate), 0) << seed;
    without_truncate_forks += count(a, OpKind::fork);
    const Scenario b = generated(seed, no_fork);
    ASSERT_EQ(why_invalid(b), "") << seed;
    EXPECT_EQ(count(b, OpKind::fork), 0) << seed;
    without_fork_truncates += count(b, OpKind::truncate);
    EXPECT_EQ(a.layout, all.layout) << seed;  // the same choices up to the program
  }
  // Both are common by default, and leaving one out keeps the other.
  EXPECT_GT(truncates, 300);
  EXPECT_GT(forks, 300);
  EXPECT_GT(without_truncate_forks, 300);
  EXPECT_GT(without_fork_truncates, 100);
}

// ---- Model level (GeneratorOptions::model). ----

GeneratorOptions with_model(ModelOptions model = {}) {
  GeneratorOptions options;
  options.model = model;
  return options;
}

// Ids of the program in order of first use.
std::vector<int> used_ids(const Scenario& s) {
  std::vector<int> ids;
  for (const Op& op : s.program) {
    for (const Chunk& chunk : op.batch()) {
      for (int id : chunk.tokens) {
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
    }
  }
  return ids;
}

TEST(GeneratorModel, WithoutTheOptionNoModelIsDrawn) {
  GeneratorOptions unset;
  unset.model.reset();
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const Scenario s = generated(seed);
    EXPECT_FALSE(s.model) << seed;
    EXPECT_EQ(generated(seed, unset), s) << seed;
  }
}

TEST(GeneratorModel, ScenariosAreValidCanonicalAndSmall) {
  std::set<int> layers, widths, ffns;
  int spare = 0, repeated = 0;
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    const Scenario s = generated(seed, with_model());
    ASSERT_EQ(why_invalid(s), "") << "seed " << seed << "\n" << write_fixture(s);
    ASSERT_TRUE(s.model) << seed;
    const ModelConfig& m = *s.model;
    EXPECT_EQ(s.tokens, TokenSource(GeneratedTokens{0, m.vocab, Distribution::small_int, false}));
    EXPECT_TRUE(s.expect.empty());
    if (seed % 5 == 0) {
      ASSERT_EQ(parse_fixture(write_fixture(s), "generated"), s) << "seed " << seed;
    }
    EXPECT_GE(m.layers, 1);
    EXPECT_LE(m.layers, 3);
    EXPECT_LE(m.width, 64);
    EXPECT_LE(m.ffn, 128);
    const std::vector<int> ids = used_ids(s);
    const int largest = ids.empty() ? 0 : *std::max_element(ids.begin(), ids.end());
    EXPECT_LT(largest, m.vocab);
    EXPECT_LE(m.vocab, std::max({1, program_tokens(s), 32}) + 16) << seed;
    spare += m.vocab > largest + 1;
    repeated += static_cast<int>(ids.size()) < program_tokens(s);
    // A model's work stays small (about 2^24 multiply-adds), far inside kMaxModelWork.
    const Layout& l = s.layout;
    const int64_t layer =
        int64_t{m.width} * (l.q_heads * l.head_dim + l.kv_heads * (l.head_dim + l.value_dim)) +
        int64_t{l.q_heads} * l.value_dim * m.width + 3 * int64_t{m.width} * m.ffn;
    const int64_t work = program_tokens(s) * (m.layers * layer + int64_t{m.width} * m.vocab);
    EXPECT_LE(work, std::max<int64_t>(int64_t{1} << 24, m.layers * layer + m.width * m.vocab))
        << seed;
    layers.insert(m.layers);
    widths.insert(m.width);
    ffns.insert(m.ffn);
  }
  EXPECT_EQ(layers, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(widths, (std::set<int>{4, 8, 12, 16, 24, 32, 64}));
  EXPECT_GE(ffns.size(), 20u);
  EXPECT_GT(spare, 100);
  EXPECT_GT(repeated, 100);
}

TEST(GeneratorModel, SameChoicesGiveTheSameScenario) {
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    EXPECT_EQ(generated(seed, with_model()), generated(seed, with_model())) << seed;
  }
}

TEST(GeneratorModel, TheLowestChoicesGiveTheSimplestModel) {
  LowestChoices lowest;
  const Scenario s = generate_scenario(lowest, with_model());
  ASSERT_TRUE(s.model);
  EXPECT_EQ(*s.model, (ModelConfig{1, 4, 1, 4, 0}));  // one word, width 4, one layer, ffn 4
  EXPECT_EQ(s.tokens, TokenSource(GeneratedTokens{0, 1, Distribution::small_int, false}));
  EXPECT_EQ(s.layout, (Layout{}));
  EXPECT_TRUE(s.program.empty());
}

TEST(GeneratorModel, OptionsBoundTheModel) {
  ModelOptions tiny;
  tiny.max_layers = 1;
  tiny.max_width = 2;
  tiny.max_ffn = 3;
  tiny.max_spare_vocab = 1;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Scenario s = generated(seed, with_model(tiny));
    ASSERT_EQ(why_invalid(s), "") << seed;
    EXPECT_EQ(s.model->layers, 1);
    EXPECT_LE(s.model->width, 2);
    EXPECT_LE(s.model->ffn, 3);
  }
  // Options beyond the generator's own bounds are clamped far inside the limits.
  ModelOptions huge;
  huge.max_layers = 1000;
  huge.max_width = 1 << 20;
  huge.max_ffn = 1 << 20;
  huge.max_spare_vocab = 1 << 20;
  GeneratorOptions options = with_model(huge);
  options.large_one_in = 1;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    const Scenario s = generated(seed, options);
    ASSERT_EQ(why_invalid(s), "") << seed;
    EXPECT_LE(s.model->layers, 4);
    EXPECT_LE(s.model->width, 128);
    EXPECT_LE(s.model->ffn, 512);
  }
}

// ---- RapidCheck drives the same generator. ----

RC_GTEST_PROP(GeneratorRc, ScenariosAreValid, ()) {
  const Scenario s = *gen_scenario();
  RC_ASSERT(why_invalid(s) == "");
}

// The mask-origin mutant fails a property over generated scenarios; RapidCheck shrinks the
// choices toward their lower bounds, and the counterexample it prints (the scenario as
// fixture JSON, through showValue) is read back. With fixed seeds, every one is the worked
// example's shape, and nearly all are the known minimum: one cached token, then a
// one-token chunk.
TEST(GeneratorRc, ShrinksMaskOriginFailuresToTheWorkedExamplesShape) {
  const EngineInfo& mutant = *find_engine("mask-origin");
  const std::vector<Op> minimum{Op::append(0, {0}), Op::append(0, {1})};
  int minimal = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    rc::detail::TestParams params;
    params.seed = seed;
    params.maxSuccess = 200;
    const auto result = rc::detail::checkTestable(
        [&] {
          const Scenario s = *gen_scenario();
          RC_ASSERT(judge_engine(s, prepare(s), mutant).verdict.pass);
        },
        rc::detail::TestMetadata{}, params);
    ASSERT_TRUE(result.is<rc::detail::FailureResult>()) << "seed " << seed << ": not rejected";
    const auto& example = result.get<rc::detail::FailureResult>().counterExample;
    ASSERT_EQ(example.size(), 1u);
    const Scenario s = parse_fixture(example[0].second, "counterexample");
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + write_fixture(s));
    EXPECT_EQ(s.sequences, 1);
    EXPECT_LE(s.layout.q_heads, 2);
    EXPECT_EQ(s.layout.q_heads, s.layout.kv_heads);
    EXPECT_EQ(s.layout.head_dim, 1);
    EXPECT_EQ(s.layout.value_dim, 1);
    EXPECT_FALSE(s.layout.rope_theta || s.layout.window || s.layout.scale);
    EXPECT_EQ(s.placement, (Placement{}));
    EXPECT_LE(program_tokens(s), 5);
    const auto* tokens = std::get_if<GeneratedTokens>(&s.tokens);
    ASSERT_NE(tokens, nullptr);
    EXPECT_TRUE(tokens->zero_scores);
    if (s.layout.q_heads == 1 && s.program == minimum) ++minimal;
  }
  std::printf("  %d of 20 seeds shrink to the known minimum\n", minimal);
  EXPECT_GE(minimal, 19);
}

}  // namespace
}  // namespace kvfuzz
