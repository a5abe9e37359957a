// The check stage (kvfuzz/check.h) with an engine of the test's own, as the Python
// bindings will give it one: a crash in a worker is a finding with its fixture, results do
// not depend on the number of workers, and a stop request ends the run with what it has.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <thread>

#include "kvfuzz/check.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"

namespace {

namespace fs = std::filesystem;
using namespace kvfuzz;

// Dies of SIGSEGV in its first step (a kernel writing out of bounds).
class Crashing final : public Engine {
 public:
  void step(std::span<const ChunkIn>, std::span<ChunkOut>) override { std::raise(SIGSEGV); }
  void reset(int) override {}
};

CheckEngine engine_of(std::shared_ptr<const EngineInfo> info) {
  CheckEngine engine{info, probe_declarations(*info)};
  return engine;
}

CheckPlan plan_of(const std::string& name, int cases, int jobs) {
  auto crashing = std::make_shared<EngineInfo>();
  crashing->name = "crashing";
  crashing->make = [](const EngineConfig&) { return std::make_unique<Crashing>(); };
  CheckPlan plan;
  plan.engines = {engine_of(std::make_shared<EngineInfo>(*find_engine("contiguous"))),
                  engine_of(crashing)};
  // What the crashing engine announces (no truncate, no fork), as kvfuzz check would choose.
  plan.generator.truncate = false;
  plan.generator.fork = false;
  for (int i = 0; i < cases; ++i) plan.case_seeds.push_back(case_seed(7, i));
  plan.jobs = jobs;
  plan.max_failures = 2;
  plan.out = fs::temp_directory_path() / ("kvfuzz-check-plan-" + name);
  fs::remove_all(plan.out);
  return plan;
}

TEST(CheckPlan, ACrashInAWorkerIsAFindingWithItsFixture) {
  const CheckPlan plan = plan_of("crash", 3, 2);
  int reported = 0;
  CheckCallbacks callbacks;
  callbacks.on_finding = [&](const CheckFinding& f) {
    ++reported;
    EXPECT_TRUE(fs::exists(f.fixture)) << "the fixture is written before the finding is reported";
  };
  const CheckResult result = run_check_plan(plan, callbacks);
  EXPECT_FALSE(result.engines[0].failed());
  EXPECT_EQ(result.engines[0].cases, 3);
  ASSERT_EQ(result.engines[1].findings.size(), 1u);
  const CheckFinding& f = result.engines[1].findings[0];
  EXPECT_EQ(f.signature, "crash/SIGSEGV");
  EXPECT_EQ(f.case_number, 1);
  EXPECT_EQ(f.seed, case_seed(7, 0));
  EXPECT_EQ(f.duplicates, 2);
  EXPECT_EQ(result.engines[1].crashes, 3);
  EXPECT_EQ(reported, 1);
}

TEST(CheckPlan, TheNumberOfWorkersChangesNothing) {
  const CheckResult one = run_check_plan(plan_of("one", 6, 1));
  const CheckResult three = run_check_plan(plan_of("three", 6, 3));
  ASSERT_EQ(one.engines.size(), three.engines.size());
  EXPECT_EQ(one.cases_run, three.cases_run);
  EXPECT_GT(one.engines[1].crashes, 0);  // not vacuous
  for (size_t e = 0; e < one.engines.size(); ++e) {
    EXPECT_EQ(one.engines[e].cases, three.engines[e].cases);
    EXPECT_EQ(one.engines[e].rows, three.engines[e].rows);
    EXPECT_EQ(one.engines[e].crashes, three.engines[e].crashes);
    ASSERT_EQ(one.engines[e].findings.size(), three.engines[e].findings.size());
    for (size_t i = 0; i < one.engines[e].findings.size(); ++i) {
      EXPECT_EQ(one.engines[e].findings[i].signature, three.engines[e].findings[i].signature);
      EXPECT_EQ(one.engines[e].findings[i].seed, three.engines[e].findings[i].seed);
      EXPECT_EQ(one.engines[e].findings[i].duplicates, three.engines[e].findings[i].duplicates);
    }
  }
}

TEST(CheckPlan, EveryCaseRunIsShownOnce) {
  int shown = 0;
  CheckCallbacks callbacks;
  callbacks.on_case = [&](const Scenario&) { ++shown; };
  const CheckResult result = run_check_plan(plan_of("cases", 4, 2), callbacks);
  EXPECT_EQ(result.cases_run, 4);
  EXPECT_EQ(shown, 4);
}

// The contiguous engine, but the second engine a process makes never comes back: in a
// fresh worker, after prefix judged the first, so under the next property.
int g_made = 0;

TEST(CheckPlan, AHangSaysWhichPropertyWasBeingJudgedAndKeepsTheVerdictsBefore) {
  auto hanging = std::make_shared<EngineInfo>(*find_engine("contiguous"));
  hanging->name = "hanging";
  hanging->make = [](const EngineConfig& config) {
    if (++g_made == 2) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return find_engine("contiguous")->make(config);
  };
  CheckPlan plan;
  plan.engines = {engine_of(hanging)};
  plan.case_seeds = {case_seed(7, 0)};
  plan.properties = {Property::prefix, Property::batch};
  plan.timeout = std::chrono::milliseconds(1000);
  plan.out = fs::temp_directory_path() / "kvfuzz-check-plan-hang";
  fs::remove_all(plan.out);
  g_made = 0;  // after the probe: each worker starts from here
  const CheckResult result = run_check_plan(plan);
  ASSERT_EQ(result.engines[0].findings.size(), 1u);
  const CheckFinding& f = result.engines[0].findings[0];
  EXPECT_EQ(f.signature, "timeout");
  EXPECT_EQ(f.judging, Property::batch);
  EXPECT_NE(f.line.find(", while judging batch; the worker was killed"), std::string::npos)
      << f.line;
  // prefix judged the case before the hang: its rows are counted, and it did not fail.
  EXPECT_GT(result.engines[0].rows, 0);
  EXPECT_EQ(result.engines[0].failing[static_cast<size_t>(Property::prefix)], 0);
  EXPECT_EQ(result.engines[0].crashes, 1);
}

TEST(CheckPlan, AStopRequestEndsTheRunWithWhatItHas) {
  volatile std::sig_atomic_t stop = 1;
  CheckCallbacks callbacks;
  callbacks.stop = &stop;
  const CheckResult result = run_check_plan(plan_of("stop", 50, 2), callbacks);
  EXPECT_TRUE(result.interrupted);
  EXPECT_EQ(result.cases_run, 0);
}

}  // namespace
