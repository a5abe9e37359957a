// The seed fixtures in corpus/seeds: each carries hand-derived `expect` rows. For every seed
// the reference reproduces them, every honest engine passes, the file is canonical, and
// each mutant it targets fails with the wrong values predicted here by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "forwarding_engine.h"
#include "judge/report.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "kvfuzz/token_table.h"
#include "run/runner.h"

namespace kvfuzz {
namespace {

const std::filesystem::path kSeeds = std::filesystem::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<std::filesystem::path> seed_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kSeeds)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(Seeds, TheCorpusHoldsEverySeedTheDesignNames) {
  for (const char* name : {"worked-example", "one-token-prefix", "empty-cache", "one-token-cache",
                           "multistep-append", "reset-two-requests", "gqa-nonzero-scores",
                           "poisoned-page-tail", "truncate-rollback", "fork-shared-prefix"}) {
    EXPECT_TRUE(std::filesystem::exists(kSeeds / (std::string(name) + ".json"))) << name;
  }
}

TEST(Seeds, EverySeedIsCanonicalAndHasDerivedExpectations) {
  for (const auto& file : seed_files()) {
    const std::string text = read_file(file);
    const Scenario scenario = parse_fixture(text, file.string());
    EXPECT_EQ(write_fixture(scenario), text) << file << " is not in canonical form";
    EXPECT_FALSE(scenario.expect.empty()) << file;
    EXPECT_GT(scenario.note.size(), 80u) << file << ": the note must carry the derivation";
  }
}

TEST(Seeds, TheReferenceReproducesEveryHandDerivedRow) {
  for (const auto& file : seed_files()) {
    const Scenario scenario = load_fixture(file);
    const Prepared prepared = prepare(scenario);
    const auto problem = judge_expect(scenario, prepared);
    EXPECT_FALSE(problem.has_value()) << file << ": " << problem.value_or("");
  }
}

TEST(Seeds, EveryHonestEnginePassesEverySeed) {
  for (const auto& file : seed_files()) {
    const Scenario scenario = load_fixture(file);
    const Prepared prepared = prepare(scenario);
    for (const EngineInfo& engine : engine_registry()) {
      if (engine.mutant) continue;
      // A seed with an attention feature or a quantized cache the engine does not declare is
      // not its to pass. (Made for the layout without them, which an engine that lacks them
      // refuses.)
      if (scenario.layout.has_features() || scenario.layout.quantized_kv()) {
        Scenario bare = scenario;
        bare.layout = Layout{};
        if (unsupported_layout(scenario, engine.make(engine_config(bare))->supports())) continue;
      }
      const CheckOutcome outcome = judge_engine(scenario, prepared, engine);
      EXPECT_TRUE(outcome.verdict.pass)
          << file << " on " << engine.name << ":\n"
          << (outcome.verdict.first ? describe_divergence(*outcome.verdict.first) : "");
      EXPECT_EQ(outcome.verdict.rows_compared, static_cast<int>(prepared.slots.size()));
    }
  }
}

// The worked example stored in bf16 and in f16: the engines that compute in those dtypes,
// which skip every f32 seed, replay it and pass, and return each row rounded to their output
// dtype, as the seeds' notes derive by hand (14/3 and 12.4 are not representable).
TEST(Seeds, LowPrecisionEnginesReplayTheWorkedExampleAndRoundItsRowsAsDerived) {
  struct Case {
    const char* seed;
    const char* engine;
    double row2, row4;
  };
  const Scenario f32 = load_fixture(kSeeds / "worked-example.json");
  for (const Case& c : {Case{"worked-example-bf16", "flash-bf16", 4.65625, 12.375},
                        Case{"worked-example-bf16", "cuda-paged-bf16", 4.65625, 12.375},
                        Case{"worked-example-f16", "flash-f16", 4.66796875, 12.3984375},
                        Case{"worked-example-f16", "contiguous-f16acc", 4.66796875, 12.3984375}}) {
    const Scenario s = load_fixture(kSeeds / (std::string(c.seed) + ".json"));
    const EngineInfo& engine = *find_engine(c.engine);
    const EngineDeclarations declared = probe_declarations(engine);
    EXPECT_EQ(replay_fixture(s, prepare(s), engine, declared).status, FixtureReplay::Status::pass)
        << c.seed << " on " << c.engine;
    EXPECT_EQ(replay_fixture(f32, prepare(f32), engine, declared).status,
              FixtureReplay::Status::skipped)
        << c.engine;
    const auto instance = engine.make(engine_config(s));
    const EngineRun run = run_engine(s, TokenTable(s.tokens, s.layout), *instance);
    const std::vector<double> expected = {2, 3, c.row2, 7.5, c.row4};
    ASSERT_EQ(run.rows.size(), expected.size()) << c.engine;
    for (const EngineRow& row : run.rows) {
      const auto p = static_cast<size_t>(row.key.pos);
      ASSERT_LT(p, expected.size()) << c.engine;
      EXPECT_EQ(row.values.at(0), expected[p]) << c.seed << " on " << c.engine << " pos " << p;
    }
  }
}

// `engine` computing as before but declaring its numerics changed by `change`.
class Redeclared final : public test::ForwardingEngine {
 public:
  Redeclared(std::unique_ptr<Engine> inner, EngineNumerics numerics)
      : ForwardingEngine(std::move(inner)), numerics_(numerics) {}
  EngineNumerics numerics() const override { return numerics_; }

 private:
  EngineNumerics numerics_;
};

EngineInfo redeclared(const EngineInfo& engine,
                      const std::function<void(EngineNumerics&)>& change) {
  EngineNumerics numerics = probe_declarations(engine).numerics;
  change(numerics);
  EngineInfo info = engine;
  info.make = [&engine, numerics](const EngineConfig& config) {
    return std::make_unique<Redeclared>(engine.make(config), numerics);
  };
  return info;
}

// The split-combine and normalised-P seeds, both ways: the engines that compute so return
// the rows the notes derive, pass when they declare it and fail when they do not (what
// every honest engine of these forms did before the declarations existed); the engines
// that compute the FlashAttention way return the exactly rounded rows.
TEST(Seeds, SplitCombineAndNormalisedPEnginesReturnTheDerivedRowsAndPassOnlyAsDeclared) {
  struct Case {
    const char* seed;
    const char* engine;
    int64_t pos;
    double row;
    std::function<void(EngineNumerics&)> undeclare;  // nullptr: nothing to take back
    int64_t first_miss = -1;                         // where the undeclared engine fails first
  };
  const auto no_lse = [](EngineNumerics& n) {
    n.split_combine_lse = false;
    n.split_partials = DType::f32;
  };
  const auto not_normalised = [](EngineNumerics& n) { n.p_normalised = false; };
  for (const Case& c :
       {Case{"split-combine-f16", "flash-f16-merge", 47, 1.0009765625, no_lse, 45},
        Case{"split-combine-f16", "flash-f16", 47, 1, nullptr},
        Case{"split-combine-f16", "paged-f16-normalised", 47, 1, nullptr},
        Case{"normalised-p-f16", "paged-f16-normalised", 2, -1.666015625, not_normalised, 2},
        Case{"normalised-p-f16", "flash-f16", 2, -1.6669921875, nullptr},
        Case{"normalised-p-f16", "contiguous-f16acc", 2, -1.6669921875, nullptr},
        Case{"normalised-p-f16", "flash-f16-merge", 2, -1.6669921875, nullptr}}) {
    const Scenario s = load_fixture(kSeeds / (std::string(c.seed) + ".json"));
    const EngineInfo& engine = *find_engine(c.engine);
    const auto instance = engine.make(engine_config(s));
    const EngineRun run = run_engine(s, TokenTable(s.tokens, s.layout), *instance);
    bool found = false;
    for (const EngineRow& row : run.rows) {
      if (row.key.pos != c.pos) continue;
      found = true;
      EXPECT_EQ(row.values.at(0), c.row) << c.seed << " on " << c.engine;
    }
    EXPECT_TRUE(found) << c.seed << " on " << c.engine << ": no row at " << c.pos;
    EXPECT_TRUE(judge_engine(s, prepare(s), engine).verdict.pass) << c.seed << " on " << c.engine;
    if (!c.undeclare) continue;
    const EngineInfo silent = redeclared(engine, c.undeclare);
    const CheckOutcome outcome = judge_engine(s, prepare(s), silent);
    ASSERT_FALSE(outcome.verdict.pass) << c.seed << " on " << c.engine << " undeclared";
    const Divergence& d = *outcome.verdict.first;
    EXPECT_EQ(d.kind, FailureKind::mismatch);
    EXPECT_EQ(d.key.pos, c.first_miss) << c.seed << " on " << c.engine << " undeclared";
  }
}

// What a mutant returns on a seed, derived by hand (see each seed's note).
struct PredictedRow {
  RowKey key;
  std::vector<double> values;  // [q_head * value_dim + d]; NaN means "must be NaN"
};

struct Prediction {
  std::string seed;
  std::string mutant;
  std::vector<PredictedRow> rows;
};

const double kE = std::exp(1.0);

// q4_0-nibble-order's position 0 read with its nibbles swapped: element j < 16 takes
// element j + 16's value 7 - j, element j >= 16 element j - 16's (j - 16) - 8.
std::vector<double> nibbles_swapped_row() {
  std::vector<double> row;
  for (int j = 0; j < 32; ++j) row.push_back(j < 16 ? 7 - j : j - 24);
  return row;
}

// affine-pack-order's position 0 read with each word's quants from the top down: element j
// of each word of 8 takes element 7 - j's value (token 0's row: j - 8, then 23 - j).
std::vector<double> affine_high_first_row() {
  std::vector<double> row;
  for (int j = 0; j < 32; ++j) {
    const int read = j / 8 * 8 + 7 - j % 8;
    row.push_back(read < 16 ? read - 8 : 23 - read);
  }
  return row;
}

const std::vector<Prediction>& predictions() {
  static const std::vector<Prediction> table = {
      {"worked-example", "mask-origin", {{{0, 0, 3}, {2}}, {{0, 0, 4}, {3}}}},
      {"worked-example-bf16", "mask-origin", {{{0, 0, 3}, {2}}, {{0, 0, 4}, {3}}}},
      {"worked-example-f16", "mask-origin", {{{0, 0, 3}, {2}}, {{0, 0, 4}, {3}}}},
      {"one-token-prefix", "mask-origin", {{{0, 0, 1}, {2}}}},
      {"one-token-cache",
       "mask-origin",
       {{{0, 0, 1}, {1}}, {{0, 0, 2}, {1.5}}, {{0, 0, 3}, {7.0 / 3}}}},
      {"multistep-append",
       "mask-origin",
       {{{0, 0, 2}, {1}},
        {{0, 0, 3}, {1.5}},
        {{0, 0, 4}, {7.0 / 3}},
        {{0, 0, 5}, {1}},
        {{0, 0, 6}, {1}},
        {{0, 0, 7}, {1}}}},
      {"multistep-append",
       "page-tail-read",
       {{{0, 0, 5}, {kNaN}}, {{0, 0, 6}, {kNaN}}, {{0, 0, 7}, {31.875}}}},
      {"reset-two-requests", "stale-kv", {{{0, 1, 0}, {7.5}}, {{0, 1, 1}, {12.4}}}},
      // The position counter survives the reset: B's rows come back at A's length.
      {"reset-two-requests", "stale-position", {{{0, 1, 3}, {16}}, {{0, 1, 4}, {24}}}},
      {"gqa-nonzero-scores",
       "wrong-kv-head",
       {{{0, 0, 0}, {0, 100, 0, 100}},
        {{0, 0, 1},
         {10 * kE / (1 + kE), (100 * kE * kE + 200) / (1 + kE * kE), 10 * kE / (1 + kE), 150}}}},
      {"poisoned-page-tail", "page-tail-read", {{{0, 0, 2}, {kNaN}}}},
      // B's decode at 6 ends in a page A filled: only re-poisoning on reset makes its tail
      // NaN again; its decode at 9 ends in a fresh page.
      {"reset-reuses-poisoned-page", "page-tail-read", {{{0, 1, 6}, {kNaN}}, {{0, 1, 9}, {kNaN}}}},
      // The counter stays at 3 after truncating to 1: rows come back at 3 and 4 (the
      // values are right: the buffer was cut, only the positions are wrong).
      {"truncate-rollback", "truncate-keeps-position", {{{0, 1, 3}, {9}}, {{0, 1, 4}, {50.0 / 3}}}},
      // The child restarts at position 0: its token lands on slot 0 (of a copied page) and
      // sees only itself.
      {"fork-shared-prefix", "fork-restarts-positions", {{{1, 1, 0}, {16}}}},
      // Sequence 1's rollback poisons the page it shares with sequence 0 in place: sequence
      // 0's next row reads the NaN where its token 3 was.
      {"fork-then-rollback",
       "truncate-shared-in-place",
       {{{0, 0, 4}, {kNaN}}, {{1, 2, 3}, {9.75}}}},
      // The CUDA kernel faults. A prefill tile whose keys are read before they are loaded
      // would read the shared memory's NaN poison; the launcher's race check stops the
      // launch at the first such read, before any row (a race: no wrong value to predict).
      {"batch-split-partition-edge", "cuda-missing-tile-sync", {}},
      // Sequence 1's 16 keys leave the second of the batch's two splits of 32 empty; unwritten,
      // the merge reads its poisoned partial.
      {"batch-split-partition-edge", "cuda-empty-split-unwritten", {{{1, 0, 15}, {kNaN}}}},
      // Sequence 0 decodes 40 keys in splits of 32 and 8, every p = 1. Reduced over half warps,
      // split 0's sum counts its lanes 0..15 only: 16 instead of 32, while its P.V sums all 32
      // values (8 x (1+2+3+4) = 80); split 1 (keys 32..39: 1,2,3,4,1,2,3 and token 54's 3 =
      // 19, 8 lanes) is whole. (80 + 19) / (16 + 8) = 99/24 instead of 99/40.
      {"batch-split-partition-edge", "cuda-half-warp-reduce", {{{0, 0, 39}, {99.0 / 24}}}},
      // A lone token decoded: the bound past its length reads slot 1, the page's NaN tail.
      {"one-token-cache", "cuda-split-bound-past-length", {{{0, 0, 0}, {kNaN}}}},
      // The wide pool's pages lie past 2^32 elements; 32-bit offsets wrap into its untouched
      // (zero) pages: every key and value reads 0, every row is 0.
      {"worked-example", "cuda-offset-32bit", {{{0, 0, 3}, {0}}, {{0, 0, 4}, {0}}}},
      // The hazards: the first decode is where thread 0 stages the page ids (the race and
      // the two-site barrier) and lane 0 weighs the splits (the lockstep race); the launch
      // stops there, before the row.
      {"one-token-prefix", "cuda-race-unsynced-pages", {}},
      {"one-token-prefix", "cuda-barrier-per-branch", {}},
      {"one-token-prefix", "cuda-race-merge-no-syncwarp", {}},
      {"poisoned-page-tail-huge",
       "page-tail-read",
       {{{0, 0, 2}, {static_cast<double>(std::numeric_limits<float>::max()) / 4}}}},
      // B's row 0 also averages A's 1..8: (36 + 16)/9.
      {"reset-reuses-poisoned-page", "stale-kv", {{{0, 1, 0}, {52.0 / 9}}}},
      // The fork's child at position 0 sees itself (16), then itself and token 5: (16 + 64)/2.
      {"fork-shared-prefix", "fork-restarts-positions", {{{1, 1, 0}, {16}}, {{1, 1, 1}, {40}}}},
      // mask-origin's mask ignores the window as well as restarting at the chunk: row 3 of
      // the first chunk sees all four keys; the decodes see position 0 alone.
      {"sliding-window-decode",
       "mask-origin",
       {{{0, 0, 3}, {3.75}}, {{0, 0, 4}, {1}}, {{0, 0, 5}, {1}}, {{0, 0, 7}, {1.5}}}},
      {"sliding-window-decode", "page-tail-read", {{{0, 0, 4}, {kNaN}}}},
      // Kept counter: tokens 3 and 4 rotate at 3 and 4, so their offsets to token 0 are 3
      // and 4 (score sin(p - j), values 1, 8, 16).
      {"rope-truncate-reset",
       "truncate-keeps-position",
       {{{0, 1, 3}, {(std::exp(std::sin(3.0)) + 8) / (std::exp(std::sin(3.0)) + 1)}},
        {{0, 1, 4},
         {(std::exp(std::sin(4.0)) + 8 * std::exp(std::sin(1.0)) + 16) /
          (std::exp(std::sin(4.0)) + std::exp(std::sin(1.0)) + 1)}}}},
      // Sequence 1's chunk at positions 1, 2 sees [0, 0] and [0, 1]; sequence 0's decode at
      // 3 sees position 0 alone.
      {"batched-step-three-sequences",
       "mask-origin",
       {{{0, 0, 3}, {1}}, {{1, 0, 1}, {8}}, {{1, 0, 2}, {68}}}},
      {"batched-step-three-sequences", "page-tail-read", {{{1, 0, 0}, {kNaN}}}},
      // Sequence 0's new epoch also sees its old 1, 2, 4, 64, 256: (327 + 4096)/6.
      {"explicit-page-order", "stale-kv", {{{0, 1, 0}, {4423.0 / 6}}}},
      {"explicit-page-order", "page-tail-read", {{{0, 0, 4}, {kNaN}}, {{1, 0, 6}, {kNaN}}}},
      // Sequence 1's new epoch also sees its old 16, 32, 128: (176 + 256)/4.
      {"large-pool-high-pages", "stale-kv", {{{1, 1, 0}, {108}}}},
      // Every decode on either side of the split edges sees position 0 alone (v = 1).
      {"split-decode-edges",
       "mask-origin",
       {{{0, 0, 30}, {1}}, {{0, 0, 31}, {1}}, {{0, 0, 49}, {1}}}},
      {"split-decode-edges", "page-tail-read", {{{0, 0, 30}, {kNaN}}}},
      // h % 2 instead of h / 3: heads 1 and 4 swap kv heads (q = 2 on both), the others agree.
      {"gqa-group-three",
       "wrong-kv-head",
       {{{0, 0, 0}, {1, 100, 1, 100, 1, 100}},
        {{0, 0, 1},
         {(1 + 2 * kE) / (1 + kE), 100 * (1 + 2 / (kE * kE)) / (1 + 1 / (kE * kE)),
          (1 + 2 / kE) / (1 + 1 / kE), 100 * (1 + 2 / kE) / (1 + 1 / kE),
          (1 + 2 * kE * kE) / (1 + kE * kE), 100 * (1 + 2 * kE) / (1 + kE)}}}},
      {"mqa-eight-heads", "mask-origin", {{{0, 0, 2}, {1, 1, 1, 1, 1, 1, 1, 1}}}},
      // Partition 1's max (100) exceeds partition 0's (0) past ln(FLT_MAX): exp overflows.
      {"split-partition-spread", "split-merge-first-max", {{{0, 0, 32}, {kNaN}}}},
      // Sequence 1's 16 keys end on a partition edge of its batch's 3 partitions.
      {"batch-split-partition-edge", "split-edge-nan", {{{1, 0, 15}, {kNaN}}}},
      // Issue 15's corners: the first pages handed out lie past 2^16 and 2^15 - 1.
      {"wide-pool-high-pages-first", "block-table-u8", {{{0, 0, 0}, {kNaN}}, {{0, 0, 1}, {kNaN}}}},
      {"wide-pool-high-pages-first", "slot-offset-u16", {{{0, 0, 0}, {kNaN}}, {{0, 0, 1}, {kNaN}}}},
      {"wide-pool-high-pages-first", "slot-mapping-i16", {{{0, 0, 0}, {2}}, {{0, 0, 1}, {kNaN}}}},
      // The window's first key on the last slot of a page: dropped one token early.
      {"window-slides-past-page-edge",
       "window-evicts-early",
       {{{0, 0, 5}, {30}}, {{0, 0, 6}, {224.0 / 3}}}},
      // Sequence 0's token 4 lands in the slot of the page it shares with sequence 1,
      // over sequence 1's token 3 (16 -> 32): (2+4+8+32+64)/5.
      {"fork-shared-prefix", "fork-shares-partial-page", {{{1, 1, 4}, {22}}}},
      // B outgrows the two stale pages it still lists: position 8 gets its own first page
      // again (the free list's front), so tokens 8 and 9 (4096, 8192) overwrite 0 and 1.
      {"reset-reuses-poisoned-page",
       "reset-keeps-block-table",
       {{{0, 1, 8}, {12256.0 / 9}}, {{0, 1, 9}, {28608.0 / 10}}}},
      // The attention features (issue 27). Decoded alone, positions 3 and 4 lose the sink:
      // the plain means of their values.
      {"worked-example-sink", "sink-prefill-only", {{{0, 0, 3}, {7.5}}, {{0, 0, 4}, {12.4}}}},
      // Key 0 capped twice on the split path: logit tanh(tanh 2) against 32 keys of logit 0.
      {"softcap-split-decode",
       "softcap-twice-split",
       {{{0, 0, 32},
         {std::exp(std::tanh(std::tanh(2.0))) / (std::exp(std::tanh(std::tanh(2.0))) + 32)}}}},
      // Head 1 takes its kv head's slope, 1 (head 0's): head 0's rows on both heads.
      {"alibi-gqa-slopes",
       "alibi-kv-head-slope",
       {{{0, 0, 1},
         {(2 * std::exp(-1.0) + 4) / (std::exp(-1.0) + 1),
          (2 * std::exp(-1.0) + 4) / (std::exp(-1.0) + 1)}}}},
      // Chunks counted from position 1, where the request after the truncate began.
      {"chunked-local-after-truncate",
       "chunked-local-from-request",
       {{{0, 1, 1}, {16}}, {{0, 1, 2}, {24}}}},
      // The quantized KV caches (issue 27). V's fp8 codes read back without the scale 0.25:
      // four times the values 2 and 2, 4, 8, 16, 32.
      {"worked-example-fp8-v", "fp8-v-scale-dropped", {{{0, 0, 0}, {8}}, {{0, 0, 4}, {49.6}}}},
      // Each q4_0 element j < 16 read from element j + 16's nibble (7 - j) and back.
      {"q4_0-nibble-order", "q4_0-nibbles-swapped", {{{0, 0, 0}, nibbles_swapped_row()}}},
      // Each affine4 quant read from the other end of its 32-bit word.
      {"affine-pack-order", "affine-pack-high-first", {{{0, 0, 0}, affine_high_first_row()}}},
      // MLA's value read from the key's RoPE part, 16, 32, 64, in both q heads.
      {"mla-latent-value",
       "mla-value-at-key-end",
       {{{0, 0, 0}, {16, 16}}, {{0, 0, 2}, {112.0 / 3, 112.0 / 3}}}},
      // Over q8_0 blocks: the tail block 64 read back as 127 * f16(64 / 127) = 127 *
      // 1032 / 2048 in every element.
      {"mla-latent-q8_0-blocks",
       "mla-value-at-key-end",
       {{{0, 0, 0}, std::vector<double>(32, 127.0 * 1032 / 2048)}}},
      // RoPE's half-split pairs turn element 1 with pair 1, a hundred times slower: scores
      // 4 cos((p - j) / 100), the keys weighed about alike.
      // RoPE's part turned at the front: equal scores, values the latents turned by j.
      {"mla-rope-part",
       "rope-part-at-front",
       {{{0, 0, 1}, {1.0403023058681398, 0.8414709848078965}},
        {{0, 0, 2}, {0.13867242184923664, 1.7733772256395064}}}},
      {"rope-interleaved-pairs",
       "rope-interleaved-as-half-split",
       {{{0, 0, 1}, {1.5000499995831682}}, {{0, 0, 2}, {2.333711080546742}}}},
  };
  return table;
}

TEST(Seeds, EveryMutantIsRejectedByASeedWithItsPredictedWrongValues) {
  std::set<std::string> rejected;
  for (const Prediction& p : predictions()) {
    SCOPED_TRACE(p.seed + " on " + p.mutant);
    const Scenario scenario = load_fixture(kSeeds / (p.seed + ".json"));
    const Prepared prepared = prepare(scenario);
    const EngineInfo* mutant = find_engine(p.mutant);
    ASSERT_NE(mutant, nullptr);
    ASSERT_TRUE(mutant->mutant);
    const CheckOutcome outcome = judge_engine(scenario, prepared, *mutant);
    EXPECT_FALSE(outcome.verdict.pass) << "the mutant passed";
    if (!outcome.verdict.pass) rejected.insert(p.mutant);
    for (const PredictedRow& want : p.rows) {
      const auto row = std::find_if(outcome.run.rows.begin(), outcome.run.rows.end(),
                                    [&](const EngineRow& r) { return r.key == want.key; });
      ASSERT_NE(row, outcome.run.rows.end()) << "no row at " << to_string(want.key);
      ASSERT_EQ(row->values.size(), want.values.size());
      for (size_t i = 0; i < want.values.size(); ++i) {
        if (std::isnan(want.values[i])) {
          EXPECT_TRUE(std::isnan(row->values[i])) << to_string(want.key) << " value " << i;
        } else {
          EXPECT_NEAR(row->values[i], want.values[i],
                      1e-5 * std::max(1.0, std::abs(want.values[i])))
              << to_string(want.key) << " value " << i;
        }
      }
    }
  }
  for (const EngineInfo& engine : engine_registry()) {
    if (engine.mutant) {
      EXPECT_TRUE(rejected.count(engine.name)) << engine.name << " is not covered";
    }
  }
}

// corpus/ holds fixtures and nothing else: a fuzzer run with corpus/ as its first
// directory would leave its raw inputs there, and every campaign would seed from them.
TEST(Corpus, HoldsOnlyFixtures) {
  const auto dir = std::filesystem::path(KVFUZZ_SOURCE_DIR) / "corpus";
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      EXPECT_EQ(entry.path().extension(), ".json") << entry.path();
    }
  }
}

// corpus/regressions holds shrunk failures: each still fails, on the engine and property
// its provenance records, and every honest engine passes it (ctest also replays it).
TEST(Regressions, EachStillFailsWhereItsProvenanceSays) {
  const auto dir = std::filesystem::path(KVFUZZ_SOURCE_DIR) / "corpus/regressions";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++seen;
    const Scenario s = load_fixture(entry.path());
    ASSERT_TRUE(s.provenance.engine && s.provenance.property) << entry.path();
    const EngineInfo* engine = find_engine(*s.provenance.engine);
    ASSERT_NE(engine, nullptr) << entry.path();
    const auto property = parse_property(*s.provenance.property);
    ASSERT_TRUE(property.has_value()) << entry.path();
    EXPECT_FALSE(judge_property(*property, s, *engine).pass) << entry.path();
    for (const EngineInfo& honest : engine_registry()) {
      if (!honest.mutant && !unjudgeable(s, probe_declarations(honest))) {
        EXPECT_TRUE(judge_property(*property, s, honest).pass) << entry.path();
      }
    }
  }
  EXPECT_GE(seen, 7);
}

TEST(Seeds, StalePositionIsReportedAtTheFirstRowOfTheNewEpoch) {
  const Scenario scenario = load_fixture(kSeeds / "reset-two-requests.json");
  const Prepared prepared = prepare(scenario);
  const CheckOutcome outcome = judge_engine(scenario, prepared, *find_engine("stale-position"));
  ASSERT_FALSE(outcome.verdict.pass);
  const Divergence& first = *outcome.verdict.first;
  EXPECT_EQ(first.kind, FailureKind::wrong_position);
  EXPECT_EQ(first.key, (RowKey{0, 1, 0}));
  EXPECT_NE(first.detail.find("position 3"), std::string::npos) << first.detail;
}

TEST(Seeds, MaskOriginOnTheWorkedExampleNamesRowThreeAndItsKeys) {
  const Scenario scenario = load_fixture(kSeeds / "worked-example.json");
  const Prepared prepared = prepare(scenario);
  const CheckOutcome outcome = judge_engine(scenario, prepared, *find_engine("mask-origin"));
  ASSERT_FALSE(outcome.verdict.pass);
  const Divergence& first = *outcome.verdict.first;
  EXPECT_EQ(first.kind, FailureKind::mismatch);
  EXPECT_EQ(first.key, (RowKey{0, 0, 3}));
  EXPECT_DOUBLE_EQ(first.got, 2.0);
  EXPECT_DOUBLE_EQ(first.expected, 7.5);
  EXPECT_EQ(first.key_lo, 0);
  EXPECT_EQ(first.key_hi, 3);
  EXPECT_EQ(outcome.verdict.rows_failed, 2);
}

}  // namespace
}  // namespace kvfuzz
