// kvfuzz check as a library: generated cases judged on engines by the chosen properties,
// each (case, engine) in a forked worker so that a crash, an abort, a sanitizer report or a
// hang of an in-process engine becomes a finding instead of ending the run. The kvfuzz
// command (harness/cli/cmd_check.cpp) keeps the options and the printing; any caller with
// EngineInfos (a Python engine) can run the same plan.
//
// Results do not depend on the number of workers: tasks are handed out in case order and
// their results are taken in case order, so which findings count, which are duplicates and
// when an engine has had enough are all decided as a single worker would decide them.
#pragma once

#include <array>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct CheckEngine {
  std::shared_ptr<const EngineInfo> info;
  EngineDeclarations declared;  // probe_declarations(*info)
};

struct CheckPlan {
  std::vector<CheckEngine> engines;
  GeneratorOptions generator;
  std::vector<uint64_t> case_seeds;  // case i is generated from PrngChoiceSource(case_seeds[i])
  std::vector<Property> properties{kAllProperties.begin(), kAllProperties.end()};
  int jobs = 1;      // workers
  bool fork = true;  // false: in this process, no isolation and no timeout (for a debugger)
  std::chrono::milliseconds timeout{600'000};  // per (case, engine), all properties together
  int max_failures = 1;             // distinct findings per engine before it is no longer run
  std::vector<std::string> ignore;  // signatures counted as ignored
  std::filesystem::path out;        // where fixtures are written
};

// One thing that went wrong on one case for one engine.
struct CheckFinding {
  size_t engine = 0;      // index into CheckPlan::engines
  int case_number = 0;    // 1-based
  uint64_t seed = 0;      // the case seed (--case-seed)
  std::string signature;  // "prefix/mismatch", "crash/SIGSEGV", "exit/1", "timeout", "engine-error"
  std::optional<Property> property;  // for a property's failure
  std::string line;                  // one line: what failed
  std::string report;                // several lines for a person (a crash's stderr tail included)
  std::filesystem::path fixture;     // written before anything is reported
  int duplicates = 0;                // later cases with the same signature (no fixture)
  bool ignored = false;              // its signature is in CheckPlan::ignore
  // The known bug's fixture it shrinks to (kvfuzz check --known): set aside, as an ignored
  // finding is. Set by the command after the run; empty otherwise.
  std::filesystem::path known;
  // The earlier finding of its engine whose case it shrinks to as well, "SIGNATURE (case N)":
  // the same root cause seen through another property or signature (--known shrinks every
  // finding). Set by the command after the run; empty otherwise.
  std::string same_cause_as;
  // A crash, exit, timeout or engine error: the property being judged when it happened (a
  // worker says so before each property), if one was. It is not counted in that
  // property's CheckEngineResult::failing, which counts verdicts; `crashes` counts it.
  std::optional<Property> judging;
};

struct CheckEngineResult {
  int cases = 0;            // cases judged on it
  int skipped = 0;          // cases outside its declarations (unjudgeable)
  std::string skipped_why;  // the first such case's reason
  long rows = 0;
  long unjudged = 0;
  // The largest share of its arithmetic bound a judged value used over its cases
  // (Verdict::bound_used): how close the engine came to failing prefix; above 1 only with
  // a failure.
  double bound_used = 0;
  double seconds = 0;
  // Cases on which each property failed (kProperties order), whether or not kept as a finding.
  std::array<int, kProperties.size()> failing{};
  int crashes = 0;  // cases that ended in a crash, an exit, a timeout or an engine error
  std::vector<CheckFinding> findings;  // distinct signatures, in case order (ignored ones too)
  bool done = false;                   // reached max_failures: no longer run
  // Whether any finding that is neither ignored nor known was made (a mutant is then
  // rejected).
  bool failed() const;
};

struct CheckResult {
  std::vector<CheckEngineResult> engines;
  int cases_run = 0;  // cases judged on at least one engine
  bool interrupted = false;
};

struct CheckProgress {
  int cases_done = 0;
  int cases_total = 0;
  int findings = 0;
  std::vector<size_t> engines_busy;  // engines with a task in flight
  double seconds = 0;                // since the start
};

struct CheckCallbacks {
  // After a new finding's fixture is written, before anything else about it is printed.
  std::function<void(const CheckFinding&)> on_finding;
  // Every case taken in order and judged on at least one engine (the events it reaches).
  std::function<void(const Scenario&)> on_case;
  // About every two seconds.
  std::function<void(const CheckProgress&)> on_progress;
  // Polled between tasks: when it is set, dispatching stops, workers are killed and the
  // result so far is returned with interrupted set (a SIGINT handler's flag).
  const volatile std::sig_atomic_t* stop = nullptr;
};

// An engine that crashed, exited or hung while it was made and asked for its declarations
// in a child (probe_declarations_isolated): nothing can be generated for it, so the run
// cannot start. what() is one line naming the engine and how the child ended.
struct ProbeCrash : std::runtime_error {
  ProbeCrash(std::string engine_name, std::string how, const std::string& line)
      : std::runtime_error(line), engine(std::move(engine_name)), signature(std::move(how)) {}
  std::string engine;
  std::string signature;  // "crash/SIGSEGV", "exit/3", "timeout"
};

// probe_declarations(engine) in a forked child, so that an engine whose creation or whose
// declarations crash, abort, exit or hang does not take the caller down: the declarations
// come back over a pipe. Throws EngineError as probe_declarations does (the engine says it
// cannot be made), ProbeCrash when the child ends without an answer or outlives `timeout`
// (it is then killed), std::runtime_error when no child can be started. An engine that
// computes out of process (EngineInfo::out_of_process) is asked directly. POSIX only.
EngineDeclarations probe_declarations_isolated(const EngineInfo& engine,
                                               std::chrono::milliseconds timeout);

// The scenario of a case: what every worker and the fixture writer generate from its seed.
Scenario check_case_scenario(const CheckPlan& plan, uint64_t seed);

// Runs the plan. Throws std::runtime_error when workers cannot be started or a fixture
// cannot be written.
CheckResult run_check_plan(const CheckPlan& plan, const CheckCallbacks& callbacks = {});

}  // namespace kvfuzz
