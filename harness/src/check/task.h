// One task of kvfuzz check: one case judged on one engine by every chosen property, in a
// worker process (workers.h) or, with --no-fork, in kvfuzz itself. Its result crosses the
// worker's pipe as JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvfuzz/check.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::check {

struct TaskId {
  int case_index = 0;  // from 0
  size_t engine = 0;
  auto operator<=>(const TaskId&) const = default;
};

struct PropertyResult {
  Property property = Property::prefix;
  bool pass = true;
  std::string signature;  // when it fails: "prefix/mismatch"
  std::string line;       // the failure line
  std::string report;
};

// A task that ended without a verdict: the worker crashed, exited or hung, or the engine
// threw past the properties.
struct TaskFailure {
  std::string signature;  // "crash/SIGSEGV", "exit/1", "timeout", "engine-error"
  std::string line;
  std::string report;
  std::optional<Property> judging;  // the property being judged when it happened, if one was
};

struct TaskResult {
  std::optional<std::string> skipped;  // why the case says nothing about the engine
  long rows = 0;
  long unjudged = 0;
  double bound_used = 0;  // prefix's largest share of the bound (Verdict::bound_used)
  double seconds = 0;
  std::vector<PropertyResult> properties;  // in the plan's order
  std::optional<TaskFailure> failure;
};

// The case a worker judges last (its CaseJudge, kvfuzz/orchestrate.h), so that the engines
// of one case share the reference's work.
class CaseCache {
 public:
  CaseJudge& judge(const CheckPlan& plan, int case_index);

 private:
  int case_index_ = -1;
  std::optional<CaseJudge> judge_;
};

// `judging` is told each property before it is judged, with the result so far (the
// verdicts of the properties before it): a worker passes both on to kvfuzz, so that a
// crash or a hang in the middle of the task says which property it was under and keeps
// the verdicts already reached.
TaskResult judge_task(const CheckPlan& plan, TaskId task, CaseCache& cache,
                      const std::function<void(Property, const TaskResult&)>& judging = {});

std::string encode(const TaskResult& result);
// Throws std::runtime_error on text that is no encoded TaskResult.
TaskResult decode(const std::string& text);

}  // namespace kvfuzz::check
