// CaseJudge (kvfuzz/orchestrate.h), the one case judge every door calls: the reference
// prepared once per numerics, the properties in the order asked, prefix's rows for
// attention and model scenarios alike, a skip outside the declarations, and an engine
// error that escapes the properties.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

const EngineInfo& engine(const std::string& name) {
  const EngineInfo* info = find_engine(name);
  if (info == nullptr) throw std::runtime_error("no engine " + name);
  return *info;
}

TEST(CaseJudge, PreparesTheReferenceOncePerNumerics) {
  CaseJudge judge(test::worked_example());
  const EngineNumerics f32 = probe_declarations(engine("contiguous")).numerics;
  EngineNumerics other = f32;
  other.output = DType::f16;
  const Prepared& first = judge.prepared(f32);
  EXPECT_EQ(&judge.prepared(f32), &first);  // the engines of a case share it
  const Prepared& second = judge.prepared(other);
  EXPECT_NE(&second, &first);
  EXPECT_EQ(second.numerics, other);
  EXPECT_EQ(&judge.prepared(f32), &first);  // still valid after the second was made
}

TEST(CaseJudge, JudgesThePropertiesInOrderAndCountsPrefixRows) {
  const Scenario s = test::worked_example();
  CaseJudge judge(s);
  const std::vector<Property> asked = {Property::schedule, Property::prefix, Property::batch};
  const EngineInfo& honest = engine("contiguous");
  std::vector<Property> told;
  const CaseVerdict verdict = judge.judge(
      asked, honest, probe_declarations(honest), [&](Property p, const CaseVerdict& so_far) {
        EXPECT_EQ(so_far.outcomes.size(), told.size());  // the verdict so far
        told.push_back(p);
      });
  EXPECT_EQ(told, asked);
  ASSERT_FALSE(verdict.skipped);
  ASSERT_EQ(verdict.outcomes.size(), asked.size());
  for (size_t i = 0; i < asked.size(); ++i) {
    EXPECT_EQ(verdict.outcomes[i].first, asked[i]);
    EXPECT_TRUE(verdict.outcomes[i].second.pass) << verdict.outcomes[i].second.report;
  }
  // The same rows as prefix judged alone; the worked example feeds five tokens.
  EXPECT_EQ(verdict.rows_compared, judge_property(Property::prefix, s, honest).rows_compared);
  EXPECT_EQ(verdict.rows_compared, 5);
  EXPECT_FALSE(verdict.engine_error);

  const EngineInfo& mutant = engine("mask-origin");
  const CaseVerdict failed = judge.judge(asked, mutant, probe_declarations(mutant));
  const PropertyOutcome prefix = failed.outcome(Property::prefix);
  EXPECT_FALSE(prefix.pass);
  EXPECT_EQ(prefix.report, judge_property(Property::prefix, s, mutant).report);
}

TEST(CaseJudge, CountsAModelScenariosLogitsRows) {
  const Scenario s =
      load_fixture(std::string(KVFUZZ_SOURCE_DIR) + "/corpus/model/model-gqa-two-layers.json");
  ASSERT_TRUE(s.model);
  CaseJudge judge(s);
  const EngineInfo& honest = engine("contiguous");
  const EngineDeclarations declared = probe_declarations(honest);
  const Property prefix = Property::prefix;
  const CaseVerdict verdict = judge.judge({&prefix, 1}, honest, declared);
  ASSERT_FALSE(verdict.skipped);
  EXPECT_TRUE(verdict.outcome(prefix).pass) << verdict.outcome(prefix).report;
  // One logits row per token the program feeds: the rows kvfuzz check has always counted.
  EXPECT_GT(verdict.rows_compared, 0);
  EXPECT_EQ(verdict.rows_compared,
            static_cast<int>(judge.prepared(declared.numerics).slots.size()));
  EXPECT_EQ(verdict.rows_unjudged, 0);
}

TEST(CaseJudge, SkipsACaseOutsideTheEnginesDeclarations) {
  CaseJudge judge(test::worked_example());  // f32 storage
  const EngineInfo& bf16 = engine("flash-bf16");
  bool told = false;
  const CaseVerdict verdict = judge.judge(kAllProperties, bf16, probe_declarations(bf16),
                                          [&](Property, const CaseVerdict&) { told = true; });
  ASSERT_TRUE(verdict.skipped);
  EXPECT_NE(verdict.skipped->find("f32"), std::string::npos) << *verdict.skipped;
  EXPECT_TRUE(verdict.outcomes.empty());
  EXPECT_FALSE(told);
}

TEST(CaseJudge, AnEngineErrorBeforeAPropertyFailsThatProperty) {
  CaseVerdict verdict;
  verdict.outcomes.emplace_back(Property::prefix, PropertyOutcome{});
  verdict.engine_error = "out of memory";
  verdict.error_while = Property::schedule;
  EXPECT_TRUE(verdict.outcome(Property::prefix).pass);
  for (const Property p : {Property::schedule, Property::layout}) {
    const PropertyOutcome out = verdict.outcome(p);
    EXPECT_FALSE(out.pass);
    ASSERT_TRUE(out.signature);
    EXPECT_EQ(to_string(*out.signature), std::string(property_name(p)) + "/engine-error");
    EXPECT_EQ(out.report,
              "the engine failed outside a run while judging schedule: out of memory\n");
  }
}

TEST(CaseJudge, AnEngineThatCannotBeMadeIsJudgedAsEachPropertyJudgesIt) {
  EngineInfo broken = engine("contiguous");
  const EngineDeclarations declared = probe_declarations(broken);
  broken.name = "cannot-be-made";
  broken.make = [](const EngineConfig&) -> std::unique_ptr<Engine> {
    throw std::runtime_error("no device");
  };
  const Scenario s = test::worked_example();
  CaseJudge judge(s);
  const CaseVerdict verdict = judge.judge(kAllProperties, broken, declared);
  ASSERT_FALSE(verdict.skipped);
  const PropertyOutcome prefix = verdict.outcome(Property::prefix);
  EXPECT_FALSE(prefix.pass);
  ASSERT_TRUE(prefix.signature);
  EXPECT_EQ(to_string(*prefix.signature), "prefix/engine-error");
  // The invariances compare the engine with itself: one that always fails the same way
  // fails prefix only, as judge_property alone says.
  for (const Property p : kAllProperties) {
    EXPECT_EQ(verdict.outcome(p).report, judge_property(p, s, broken).report) << property_name(p);
  }
}

// An engine whose every step fails as a hung exec engine's does: it counts a hang, then
// throws. With `hangs` the case ends after the first property; without it (an engine that
// merely throws) every property is judged.
TEST(CaseJudge, ACaseEndsAtItsEnginesFirstHang) {
  EngineInfo hanging = engine("contiguous");
  const EngineDeclarations declared = probe_declarations(hanging);
  auto count = std::make_shared<int64_t>(5);  // hangs of earlier cases do not count
  hanging.name = "hanging";
  hanging.make = [count](const EngineConfig&) -> std::unique_ptr<Engine> {
    ++*count;
    throw EngineError("the engine did not answer step within 1 s");
  };
  const Scenario s = test::worked_example();
  CaseJudge judge(s);
  const CaseVerdict thrown = judge.judge(kAllProperties, hanging, declared);
  EXPECT_EQ(thrown.outcomes.size(), kAllProperties.size());
  EXPECT_FALSE(thrown.hung_while);

  hanging.hangs = [count] { return *count; };
  const CaseVerdict hung = judge.judge(kAllProperties, hanging, declared);
  ASSERT_EQ(hung.outcomes.size(), 1u);
  ASSERT_TRUE(hung.hung_while);
  EXPECT_EQ(*hung.hung_while, Property::prefix);
  const PropertyOutcome prefix = hung.outcome(Property::prefix);
  EXPECT_FALSE(prefix.pass);
  EXPECT_NE(prefix.report.find("did not answer step within 1 s"), std::string::npos);
  EXPECT_NE(prefix.report.find("the engine hung while judging prefix"), std::string::npos);
  const PropertyOutcome schedule = hung.outcome(Property::schedule);
  EXPECT_FALSE(schedule.pass);
  EXPECT_EQ(schedule.report,
            "the engine hung while judging prefix (its time limit ended the call): kvfuzz "
            "judged no further property of this case\n");
}

}  // namespace
}  // namespace kvfuzz
