// The six properties (property.h) and the scenario variants behind the invariances
// (property_variants.h): each variant changes its own dimension and nothing else, every
// honest engine passes all six on the seed fixtures, and each mutant fails the properties
// it targets.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <span>

#include "judge/property_variants.h"
#include "judge/reference.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"
#include "run/runner.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

const std::filesystem::path kSeeds = std::filesystem::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds";

Scenario seed(const std::string& name) {
  return load_fixture(kSeeds / (name + ".json"));
}

std::vector<std::filesystem::path> seed_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kSeeds)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

const EngineInfo& engine(const std::string& name) {
  const EngineInfo* info = find_engine(name);
  if (info == nullptr) throw std::runtime_error("no engine " + name);
  return *info;
}

std::vector<const EngineInfo*> honest_engines() {
  std::vector<const EngineInfo*> engines;
  for (const EngineInfo& info : engine_registry()) {
    if (!info.mutant) engines.push_back(&info);
  }
  return engines;
}

// Generated scenarios (fixed seeds) on top of the seeds, for the structural checks.
std::vector<Scenario> sample_scenarios() {
  std::vector<Scenario> scenarios;
  for (const auto& file : seed_files()) scenarios.push_back(load_fixture(file));
  GeneratorOptions options;
  options.typical_head_dim = 4;
  options.max_head_dim = 8;
  for (uint64_t s = 0; s < 150; ++s) {
    PrngChoiceSource choices(1000 + s);
    scenarios.push_back(generate_scenario(choices, options));
  }
  return scenarios;
}

// Per (seq, epoch): the full logical token stream (inherited prefix included).
std::map<StreamId, std::vector<int>> streams_of(const Scenario& scenario) {
  std::map<StreamId, std::vector<int>> streams;
  for (const LogicalStream& s : logical_streams(scenario)) streams[{s.seq, s.epoch}] = s.tokens;
  return streams;
}

// The ops that are not forwards, each with every sequence's held length just before it.
std::vector<std::pair<Op, std::map<int, int64_t>>> epoch_ops(const Scenario& scenario) {
  std::vector<std::pair<Op, std::map<int, int64_t>>> ops;
  std::map<int, int64_t> fed;  // per sequence: tokens fed so far (all epochs)
  for (const Op& op : scenario.program) {
    if (op.kind == OpKind::append || op.kind == OpKind::step) {
      for (const Chunk& c : op.batch()) fed[c.seq] += static_cast<int64_t>(c.tokens.size());
    } else {
      ops.emplace_back(op, fed);
    }
  }
  return ops;
}

// The members of each forward, consecutive repeats collapsed.
std::vector<std::pair<OpKind, std::vector<int>>> membership(const Scenario& scenario) {
  std::vector<std::pair<OpKind, std::vector<int>>> runs;
  for (const Op& op : scenario.program) {
    std::vector<int> members;
    for (const Chunk& c : op.batch()) members.push_back(c.seq);
    std::pair<OpKind, std::vector<int>> entry{op.kind, members};
    if (runs.empty() || runs.back() != entry) runs.push_back(entry);
  }
  return runs;
}

void expect_valid(const ScenarioVariant& v, const std::string& what) {
  const auto error = validate(v.scenario);
  EXPECT_FALSE(error.has_value()) << what << ": " << v.description << ": "
                                  << (error ? error->path + ": " + error->message : "");
  EXPECT_TRUE(v.scenario.expect.empty()) << what;
}

// ---------------------------------------------------------------------------------------
// Names

TEST(PropertyNames, RoundTripAndSignatures) {
  const std::vector<std::string> names = {"prefix", "schedule", "layout",
                                          "poison", "reset",    "batch"};
  for (size_t i = 0; i < kAllProperties.size(); ++i) {
    EXPECT_EQ(property_name(kAllProperties[i]), names[i]);
    EXPECT_EQ(parse_property(names[i]), kAllProperties[i]);
  }
  EXPECT_FALSE(parse_property("Prefix").has_value());
  EXPECT_FALSE(parse_property("").has_value());
  EXPECT_EQ(to_string(FailureSignature{Property::prefix, FailureKind::mismatch}),
            "prefix/mismatch");
  EXPECT_EQ(to_string(FailureSignature{Property::reset, FailureKind::wrong_position}),
            "reset/wrong-position");
  EXPECT_EQ(to_string(FailureSignature{Property::poison, FailureKind::not_finite}),
            "poison/not-finite");
}

TEST(PropertyNames, EveryRowHasANameAndAClaimAndOnlyInvariancesHaveVariants) {
  for (const PropertyInfo& row : kProperties) {
    EXPECT_EQ(&property_info(row.property), &row);
    EXPECT_FALSE(row.name.empty());
    EXPECT_FALSE(row.claim.empty()) << row.name;
  }
  for (const Scenario& s : sample_scenarios()) {
    EXPECT_TRUE(property_variants(Property::prefix, s).empty()) << s.name;
  }
}

// ---------------------------------------------------------------------------------------
// Variants

TEST(Variants, SeedIsAFunctionOfWhatTheRunDependsOn) {
  Scenario a = test::worked_example();
  Scenario b = a;
  b.name = "another-name";
  b.note = "another note";
  b.provenance.source = "shrink";
  EXPECT_EQ(variant_seed(a), variant_seed(b));
  b.program[1].tokens = {4, 3};
  EXPECT_NE(variant_seed(a), variant_seed(b));
  b = a;
  b.layout.page_size = 3;
  EXPECT_NE(variant_seed(a), variant_seed(b));
  b = a;
  b.placement.poison = Poison::huge;
  EXPECT_NE(variant_seed(a), variant_seed(b));
}

TEST(Variants, ScheduleKeepsStreamsResetsAndMembersAndChangesTheSchedule) {
  int changed = 0, total = 0;
  for (const Scenario& s : sample_scenarios()) {
    const ScenarioVariant v = schedule_variant(s, variant_seed(s));
    expect_valid(v, s.name);
    EXPECT_EQ(streams_of(v.scenario), streams_of(s)) << s.name << ": " << v.description;
    EXPECT_EQ(epoch_ops(v.scenario), epoch_ops(s)) << s.name << ": " << v.description;
    EXPECT_EQ(membership(v.scenario), membership(s)) << s.name << ": " << v.description;
    EXPECT_EQ(v.scenario.layout, s.layout);
    EXPECT_EQ(v.scenario.placement, s.placement);
    EXPECT_EQ(v.scenario.tokens, s.tokens);
    EXPECT_EQ(expected_slots(v.scenario).size(), expected_slots(s).size());
    for (const auto& [from, to] : v.streams) EXPECT_EQ(from, to);
    ++total;
    if (!same_run(v.scenario, s)) ++changed;
  }
  // Most scenarios have a run of forwards that gives every member two tokens.
  EXPECT_GT(changed * 10, total * 7) << changed << " of " << total;
}

TEST(Variants, ScheduleOfTheWorkedExampleMovesTheCut) {
  const Scenario s = test::worked_example();
  const ScenarioVariant v = schedule_variant(s, variant_seed(s));
  ASSERT_FALSE(same_run(v.scenario, s)) << v.description;
  std::vector<int> flat;
  for (const Op& op : v.scenario.program) {
    EXPECT_EQ(op.kind, OpKind::append);
    EXPECT_EQ(op.seq, 0);
    flat.insert(flat.end(), op.tokens.begin(), op.tokens.end());
  }
  EXPECT_EQ(flat, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_NE(v.description.find("schedule: "), std::string::npos);
}

TEST(Variants, ScheduleLeavesSingleTokenMembersAndResetsAlone) {
  Scenario s = test::worked_example();
  s.sequences = 2;
  s.program = {Op::step({{0, {0, 1, 2}}, {1, {3}}}), Op::reset(0), Op::append(0, {4})};
  const ScenarioVariant v = schedule_variant(s, variant_seed(s));
  EXPECT_TRUE(same_run(v.scenario, s)) << v.description;
  EXPECT_NE(v.description.find("unchanged"), std::string::npos);
}

TEST(Variants, LayoutChangesOnlyPageSizeAndOrder) {
  for (const Scenario& s : sample_scenarios()) {
    const ScenarioVariant v = layout_variant(s, variant_seed(s));
    expect_valid(v, s.name);
    EXPECT_NE(v.scenario.layout.page_size, s.layout.page_size);
    Layout layout = v.scenario.layout;
    layout.page_size = s.layout.page_size;
    EXPECT_EQ(layout, s.layout);
    EXPECT_EQ(v.scenario.program, s.program);
    EXPECT_EQ(v.scenario.tokens, s.tokens);
    EXPECT_EQ(v.scenario.sequences, s.sequences);
    EXPECT_EQ(v.scenario.placement.poison, s.placement.poison);
    if (s.placement.order != PageOrder::explicit_list) {
      EXPECT_NE(v.scenario.placement.order, s.placement.order) << v.description;
    }
    // Spare pool capacity is kept (in slots, rounded up to whole pages).
    const int64_t spare =
        static_cast<int64_t>(engine_config(s).page_order.size()) - required_pool_pages(s);
    const int64_t new_spare = static_cast<int64_t>(engine_config(v.scenario).page_order.size()) -
                              required_pool_pages(v.scenario);
    EXPECT_GE(new_spare * v.scenario.layout.page_size, spare * s.layout.page_size);
    for (const auto& [from, to] : v.streams) EXPECT_EQ(from, to);
  }
}

TEST(Variants, PoisonChangesOnlyThePoisonBetweenFiniteAndNot) {
  for (const Scenario& s : sample_scenarios()) {
    const ScenarioVariant v = poison_variant(s, variant_seed(s));
    expect_valid(v, s.name);
    EXPECT_NE(v.scenario.placement.poison, s.placement.poison);
    EXPECT_NE(v.scenario.placement.poison == Poison::huge, s.placement.poison == Poison::huge);
    Scenario back = v.scenario;
    back.placement.poison = s.placement.poison;
    back.expect = s.expect;
    EXPECT_TRUE(back == s);
  }
}

TEST(Variants, ResetReplaysEachLaterEpochAloneWithItsTokensAndKeys) {
  const Scenario s = seed("reset-two-requests");
  const std::vector<ScenarioVariant> variants = reset_variants(s);
  ASSERT_EQ(variants.size(), 1u);
  const ScenarioVariant& v = variants[0];
  expect_valid(v, s.name);
  // Request B's ops only, no reset, as epoch 0 of the same sequence.
  std::vector<Op> b_ops;
  bool after_reset = false;
  for (const Op& op : s.program) {
    if (op.kind == OpKind::reset) {
      after_reset = true;
    } else if (after_reset) {
      b_ops.push_back(op);
    }
  }
  EXPECT_EQ(v.scenario.program, b_ops);
  EXPECT_EQ((v.streams), (std::map<StreamId, StreamId>{{{0, 0}, {0, 1}}}));
  EXPECT_EQ(streams_of(v.scenario).at({0, 0}), streams_of(s).at({0, 1}));
  EXPECT_EQ(engine_config(v.scenario).page_order, engine_config(s).page_order);
}

TEST(Variants, ResetFeedsWhatATruncateOrForkLeftAsAPrefix) {
  const Scenario t = seed("truncate-rollback");
  const std::vector<ScenarioVariant> tv = reset_variants(t);
  ASSERT_EQ(tv.size(), 1u);
  expect_valid(tv[0], t.name);
  EXPECT_EQ(tv[0].scenario.program,
            (std::vector<Op>{Op::append(0, {0}), Op::append(0, {3}), Op::append(0, {4})}));
  EXPECT_EQ(streams_of(tv[0].scenario).at({0, 0}), streams_of(t).at({0, 1}));

  const Scenario f = seed("fork-shared-prefix");
  const std::vector<ScenarioVariant> fv = reset_variants(f);
  ASSERT_EQ(fv.size(), 1u);
  expect_valid(fv[0], f.name);
  EXPECT_EQ(fv[0].scenario.program,
            (std::vector<Op>{Op::append(1, {0, 1, 2}), Op::append(1, {3}), Op::append(1, {5})}));
  EXPECT_EQ((fv[0].streams), (std::map<StreamId, StreamId>{{{1, 0}, {1, 1}}}));
  EXPECT_EQ(streams_of(fv[0].scenario).at({1, 0}), streams_of(f).at({1, 1}));
}

TEST(Variants, BatchKeepsOneSequencesOpsWithStepsReducedToItsChunk) {
  Scenario s = test::worked_example();
  s.sequences = 3;
  s.program = {Op::append(0, {0, 1}), Op::step({{0, {2}}, {1, {3, 4}}, {2, {0}}}), Op::reset(1),
               Op::reset(0), Op::step({{1, {1}}, {0, {4}}})};
  const ScenarioVariant v = batch_variant(s, 1);
  expect_valid(v, s.name);
  EXPECT_EQ(v.scenario.program,
            (std::vector<Op>{Op::step({{1, {3, 4}}}), Op::reset(1), Op::step({{1, {1}}})}));
  EXPECT_EQ((v.streams), (std::map<StreamId, StreamId>{{{1, 0}, {1, 0}}, {{1, 1}, {1, 1}}}));
  EXPECT_EQ(sequences_with_neighbours(s), (std::vector<int>{0, 1, 2}));
  s.program = {Op::append(2, {0}), Op::reset(2), Op::append(2, {1})};
  EXPECT_TRUE(sequences_with_neighbours(s).empty());
}

TEST(Variants, BatchTurnsAForkIntoItIntoAResetAndTheSourcesTokens) {
  const Scenario f = seed("fork-shared-prefix");
  const ScenarioVariant child = batch_variant(f, 1);
  expect_valid(child, f.name);
  EXPECT_EQ(child.scenario.program, (std::vector<Op>{Op::reset(1), Op::append(1, {0, 1, 2}),
                                                     Op::append(1, {3}), Op::append(1, {5})}));
  EXPECT_EQ(streams_of(child.scenario).at({1, 1}), streams_of(f).at({1, 1}));
  const ScenarioVariant parent = batch_variant(f, 0);
  expect_valid(parent, f.name);
  EXPECT_EQ(parent.scenario.program,
            (std::vector<Op>{Op::append(0, {0, 1, 2}), Op::append(0, {4})}));
}

TEST(Variants, ResetAndBatchVariantsAreValidAndKeepEveryMappedStream) {
  for (const Scenario& s : sample_scenarios()) {
    const auto base = streams_of(s);
    std::vector<ScenarioVariant> variants = reset_variants(s);
    for (int seq : sequences_with_neighbours(s)) variants.push_back(batch_variant(s, seq));
    for (const ScenarioVariant& v : variants) {
      expect_valid(v, s.name);
      const auto mine = streams_of(v.scenario);
      for (const auto& [from, to] : v.streams) {
        ASSERT_TRUE(mine.count(from)) << s.name << ": " << v.description;
        ASSERT_TRUE(base.count(to)) << s.name << ": " << v.description;
        EXPECT_EQ(mine.at(from), base.at(to)) << s.name << ": " << v.description;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// judge_property

TEST(JudgeProperty, EveryHonestEnginePassesAllSixOnEverySeed) {
  for (const auto& file : seed_files()) {
    const Scenario s = load_fixture(file);
    for (const EngineInfo* e : honest_engines()) {
      // A seed with an attention feature or a quantized cache the engine does not declare is
      // not its to pass. (Made for the layout without them, which an engine that lacks them
      // refuses.)
      if (s.layout.has_features() || s.layout.quantized_kv()) {
        Scenario bare = s;
        bare.layout = Layout{};
        if (unsupported_layout(s, e->make(engine_config(bare))->supports())) continue;
      }
      for (Property p : kAllProperties) {
        const PropertyOutcome out = judge_property(p, s, *e);
        EXPECT_TRUE(out.pass) << file.filename() << " on " << e->name << ", " << property_name(p)
                              << ":\n"
                              << out.report;
        EXPECT_FALSE(out.signature.has_value());
        EXPECT_FALSE(out.first.has_value());
      }
    }
  }
}

struct Targeted {
  std::string mutant;
  std::string fixture;
  Property property;
  FailureKind kind;
};

TEST(JudgeProperty, EachMutantFailsThePropertiesItTargets) {
  const std::vector<Targeted> cases = {
      {"mask-origin", "worked-example", Property::prefix, FailureKind::mismatch},
      {"mask-origin", "worked-example", Property::schedule, FailureKind::mismatch},
      {"stale-position", "reset-two-requests", Property::prefix, FailureKind::wrong_position},
      {"stale-position", "reset-two-requests", Property::reset, FailureKind::wrong_position},
      {"stale-kv", "reset-two-requests", Property::prefix, FailureKind::mismatch},
      {"stale-kv", "reset-two-requests", Property::reset, FailureKind::mismatch},
      {"page-tail-read", "poisoned-page-tail", Property::prefix, FailureKind::not_finite},
      {"page-tail-read", "poisoned-page-tail", Property::layout, FailureKind::not_finite},
      {"page-tail-read", "poisoned-page-tail", Property::poison, FailureKind::not_finite},
      {"wrong-kv-head", "gqa-nonzero-scores", Property::prefix, FailureKind::mismatch},
      {"truncate-keeps-position", "truncate-rollback", Property::prefix,
       FailureKind::wrong_position},
      {"truncate-keeps-position", "truncate-rollback", Property::reset,
       FailureKind::wrong_position},
      {"fork-restarts-positions", "fork-shared-prefix", Property::prefix,
       FailureKind::wrong_position},
      {"fork-restarts-positions", "fork-shared-prefix", Property::reset,
       FailureKind::wrong_position},
      {"fork-restarts-positions", "fork-shared-prefix", Property::batch,
       FailureKind::wrong_position},
      {"truncate-shared-in-place", "fork-then-rollback", Property::prefix, FailureKind::not_finite},
      {"reset-keeps-block-table", "reset-reuses-poisoned-page", Property::prefix,
       FailureKind::mismatch},
      {"reset-keeps-block-table", "reset-reuses-poisoned-page", Property::reset,
       FailureKind::mismatch},
      {"fork-shares-partial-page", "fork-shared-prefix", Property::prefix, FailureKind::mismatch},
  };
  for (const Targeted& c : cases) {
    const Scenario s = seed(c.fixture);
    const PropertyOutcome out = judge_property(c.property, s, engine(c.mutant));
    const std::string what = c.mutant + " on " + c.fixture + ", " +
                             std::string(property_name(c.property)) + ":\n" + out.report;
    ASSERT_FALSE(out.pass) << what;
    ASSERT_TRUE(out.signature.has_value()) << what;
    ASSERT_TRUE(out.first.has_value()) << what;
    EXPECT_EQ(*out.signature, (FailureSignature{c.property, c.kind})) << what;
    EXPECT_EQ(out.first->kind, c.kind) << what;
    EXPECT_NE(out.report.find(std::string(property_name(c.property)) + ": engine '" + c.mutant),
              std::string::npos)
        << what;
    if (c.property != Property::prefix) {
      EXPECT_NE(out.report.find("variant: "), std::string::npos) << what;
    }
  }
}

TEST(JudgeProperty, TheResetVariantPinsTheFirstRowOfTheNewRequest) {
  const PropertyOutcome out =
      judge_property(Property::reset, seed("reset-two-requests"), engine("stale-kv"));
  ASSERT_TRUE(out.first.has_value()) << out.report;
  EXPECT_EQ(out.first->key.epoch, 1);
  EXPECT_EQ(out.first->key.pos, 0);
  EXPECT_NE(out.report.find("reset: seq 0 epoch 1"), std::string::npos) << out.report;
}

// An engine that is wrong the same way under every variant fails prefix equivalence only:
// wrong-kv-head reads the wrong kv head whatever the schedule, pages, poison, resets or
// neighbours.
TEST(JudgeProperty, AConsistentlyWrongEngineFailsOnlyPrefix) {
  const Scenario s = seed("gqa-nonzero-scores");
  for (Property p : kAllProperties) {
    const PropertyOutcome out = judge_property(p, s, engine("wrong-kv-head"));
    EXPECT_EQ(out.pass, p != Property::prefix) << property_name(p) << ":\n" << out.report;
  }
}

TEST(JudgeProperty, IsAPureFunctionOfScenarioAndEngine) {
  for (const std::string name : {"worked-example", "poisoned-page-tail", "reset-two-requests"}) {
    const Scenario s = seed(name);
    for (const EngineInfo& e : engine_registry()) {
      for (Property p : kAllProperties) {
        const PropertyOutcome a = judge_property(p, s, e);
        const PropertyOutcome b = judge_property(p, s, e);
        EXPECT_EQ(a.pass, b.pass);
        EXPECT_EQ(a.signature, b.signature);
        EXPECT_EQ(a.report, b.report) << name << " " << e.name << " " << property_name(p);
      }
    }
  }
}

TEST(JudgeProperty, AVariantEngineErrorIsAnEngineErrorOfTheProperty) {
  // An engine that refuses page size 1 breaks layout invariance for a base whose layout variant
  // picks it, and nothing else.
  EngineInfo picky = engine("paged");
  picky.name = "picky";
  const EngineFactory honest = picky.make;
  picky.make = [honest](const EngineConfig& config) -> std::unique_ptr<Engine> {
    if (config.layout.page_size != 4) throw EngineError("page size must be 4");
    return honest(config);
  };
  const Scenario s = seed("poisoned-page-tail");  // page size 4
  const PropertyOutcome prefix = judge_property(Property::prefix, s, picky);
  EXPECT_TRUE(prefix.pass) << prefix.report;
  const PropertyOutcome layout = judge_property(Property::layout, s, picky);
  ASSERT_FALSE(layout.pass);
  EXPECT_EQ(*layout.signature, (FailureSignature{Property::layout, FailureKind::engine_error}));
  EXPECT_NE(layout.report.find("page size must be 4"), std::string::npos) << layout.report;
}

// An engine whose reset throws unless the page size is 4: the layout variant fails after
// its last row, where the base does not.
class ResetNeedsPageSize4 final : public Engine {
 public:
  ResetNeedsPageSize4(std::unique_ptr<Engine> inner, int page_size)
      : inner_(std::move(inner)), page_size_(page_size) {}
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    inner_->step(chunks, outs);
  }
  void reset(int seq) override {
    if (page_size_ != 4) throw EngineError("reset needs page size 4");
    inner_->reset(seq);
  }

 private:
  std::unique_ptr<Engine> inner_;
  int page_size_;
};

TEST(JudgeProperty, AVariantThatFailsAfterItsLastRowStillFails) {
  EngineInfo picky = engine("paged");
  picky.name = "reset-needs-page-size-4";
  const EngineFactory honest = picky.make;
  picky.make = [honest](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<ResetNeedsPageSize4>(honest(config), config.layout.page_size);
  };
  Scenario s = test::worked_example();
  s.layout.page_size = 4;
  s.program.push_back(Op::reset(0));
  EXPECT_TRUE(judge_property(Property::prefix, s, picky).pass);
  const PropertyOutcome layout = judge_property(Property::layout, s, picky);
  ASSERT_FALSE(layout.pass);
  EXPECT_EQ(*layout.signature, (FailureSignature{Property::layout, FailureKind::engine_error}));
  EXPECT_NE(layout.report.find("the variant run failed at its op 2"), std::string::npos)
      << layout.report;
}

// Model scenarios go through the same judge_property (model_check.h): honest engines pass
// all six on corpus/model, and mutants fail at model level with the layer named.
TEST(ModelProperties, HonestEnginesPassAllSixAndMutantsFail) {
  const auto dir = std::filesystem::path(KVFUZZ_SOURCE_DIR) / "corpus/model";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    const Scenario s = load_fixture(entry.path());
    ASSERT_TRUE(s.model.has_value()) << entry.path();
    for (const EngineInfo* honest : honest_engines()) {
      if (unjudgeable(s, probe_declarations(*honest))) continue;  // low-precision numerics
      for (Property p : kAllProperties) {
        const PropertyOutcome outcome = judge_property(p, s, *honest);
        EXPECT_TRUE(outcome.pass) << entry.path() << " " << property_name(p) << "\n"
                                  << outcome.report;
      }
    }
  }
  EXPECT_GE(files, 3);

  const Scenario resets = load_fixture(dir / "model-reset-two-requests.json");
  const PropertyOutcome prefix = judge_property(Property::prefix, resets, engine("stale-kv"));
  ASSERT_FALSE(prefix.pass);
  EXPECT_EQ(prefix.signature->kind, FailureKind::mismatch);
  EXPECT_NE(prefix.report.find("(model level)"), std::string::npos) << prefix.report;
  EXPECT_NE(prefix.report.find("layer 0:"), std::string::npos) << prefix.report;
  // A scenario that already fails prefix gives an invariance nothing of its own to say.
  const Scenario forked = load_fixture(dir / "model-fork-then-rollback.json");
  EXPECT_FALSE(judge_property(Property::prefix, forked, engine("fork-restarts-positions")).pass);
  EXPECT_TRUE(judge_property(Property::schedule, forked, engine("fork-restarts-positions")).pass);

  // A prompt prefilled in one chunk from an empty cache passes mask-origin (its mask origin
  // is the chunk's, which is the sequence's); the same tokens re-chunked do not: schedule
  // fails at model level, with the logits row and the layer.
  Scenario prompt = resets;
  prompt.name = "prompt";
  prompt.program = {Op::append(0, {1, 2, 3, 4, 5})};
  EXPECT_TRUE(judge_property(Property::prefix, prompt, engine("mask-origin")).pass);
  const PropertyOutcome schedule =
      judge_property(Property::schedule, prompt, engine("mask-origin"));
  ASSERT_FALSE(schedule.pass);
  EXPECT_EQ(schedule.signature->property, Property::schedule);
  EXPECT_NE(schedule.report.find("variant: schedule"), std::string::npos) << schedule.report;
  EXPECT_NE(schedule.report.find("layer 0:"), std::string::npos) << schedule.report;
  EXPECT_TRUE(judge_property(Property::schedule, prompt, engine("contiguous")).pass);
}

}  // namespace
}  // namespace kvfuzz
