// run_check_plan (kvfuzz/check.h): tasks handed out in case order, to workers or in this
// process, and their results taken in case order.
#include "kvfuzz/check.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "check/task.h"
#include "check/workers.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/fixture_io.h"

namespace kvfuzz {

bool CheckEngineResult::failed() const {
  return std::any_of(findings.begin(), findings.end(),
                     [](const CheckFinding& f) { return !f.ignored && f.known.empty(); });
}

Scenario check_case_scenario(const CheckPlan& plan, uint64_t seed) {
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, plan.generator);
}

namespace {

using check::TaskId;
using check::TaskResult;
using Clock = std::chrono::steady_clock;

// The results of a plan, taken in case order.
class Gatherer {
 public:
  Gatherer(const CheckPlan& plan, const CheckCallbacks& callbacks)
      : plan_(plan), callbacks_(callbacks) {
    result_.engines.resize(plan.engines.size());
  }

  // The next task whose result counts, or nothing when the plan is through.
  std::optional<TaskId> next() const { return next_after(cursor_); }

  // Whether a task handed out now may still count (its engine has not had enough).
  bool wanted(TaskId task) const { return !result_.engines[task.engine].done; }

  // The next task to hand out after `task` (skipping engines that have had enough).
  std::optional<TaskId> next_after(std::optional<TaskId> task) const {
    TaskId t = task.value_or(TaskId{0, 0});
    if (task) {
      if (++t.engine == plan_.engines.size()) {
        t.engine = 0;
        ++t.case_index;
      }
    }
    for (; t.case_index < static_cast<int>(plan_.case_seeds.size()); ++t.case_index, t.engine = 0) {
      for (; t.engine < plan_.engines.size(); ++t.engine) {
        if (wanted(t)) return t;
      }
    }
    return std::nullopt;
  }

  // Takes `result` as the result of next(); moves on.
  void take(TaskId task, const TaskResult& result) {
    CheckEngineResult& tally = result_.engines[task.engine];
    if (result.skipped) {
      if (tally.skipped++ == 0) tally.skipped_why = *result.skipped;
    } else {
      ++tally.cases;
      case_judged_ = true;
      tally.rows += result.rows;
      tally.unjudged += result.unjudged;
      tally.bound_used = std::max(tally.bound_used, result.bound_used);
      tally.seconds += result.seconds;
      for (const check::PropertyResult& p : result.properties) {
        if (p.pass) continue;
        ++tally.failing[static_cast<size_t>(p.property)];
        find(task, p.signature, p.property, p.line, p.report, std::nullopt);
      }
      if (result.failure) {
        ++tally.crashes;
        find(task, result.failure->signature, std::nullopt, result.failure->line,
             result.failure->report, result.failure->judging);
      }
    }
    cursor_ = task;
    // The case is complete once its last wanted engine is taken.
    const std::optional<TaskId> after = next_after(task);
    if (!after || after->case_index != task.case_index) end_case(task.case_index);
  }

  // Cases whose every wanted engine is taken: a case half judged is not counted, so the
  // progress line never runs ahead of the summary's count.
  int cases_done() const { return cases_done_; }
  int findings() const {
    int n = 0;
    for (const CheckEngineResult& e : result_.engines) {
      for (const CheckFinding& f : e.findings) n += f.ignored ? 0 : 1 + f.duplicates;
    }
    return n;
  }
  CheckResult& result() { return result_; }

 private:
  void end_case(int case_index) {
    cases_done_ = case_index + 1;
    if (case_judged_) {
      ++result_.cases_run;
      if (callbacks_.on_case) {
        callbacks_.on_case(
            check_case_scenario(plan_, plan_.case_seeds[static_cast<size_t>(case_index)]));
      }
    }
    case_judged_ = false;
  }

  void find(TaskId task, const std::string& signature, std::optional<Property> property,
            const std::string& line, const std::string& report, std::optional<Property> judging) {
    CheckEngineResult& tally = result_.engines[task.engine];
    if (tally.done) return;  // this case's later findings, after the engine's last one
    for (CheckFinding& f : tally.findings) {
      if (f.signature == signature) {
        ++f.duplicates;
        return;
      }
    }
    CheckFinding finding;
    finding.engine = task.engine;
    finding.case_number = task.case_index + 1;
    finding.seed = plan_.case_seeds[static_cast<size_t>(task.case_index)];
    finding.signature = signature;
    finding.property = property;
    finding.line = line;
    finding.report = report;
    finding.judging = judging;
    finding.ignored =
        std::find(plan_.ignore.begin(), plan_.ignore.end(), signature) != plan_.ignore.end();
    if (!finding.ignored) {
      // Written to disk first: whatever happens next, the failing case is kept.
      finding.fixture = save(finding);
      if (callbacks_.on_finding) callbacks_.on_finding(finding);
    }
    tally.findings.push_back(finding);
    const auto kept = std::count_if(tally.findings.begin(), tally.findings.end(),
                                    [](const CheckFinding& f) { return !f.ignored; });
    if (kept >= plan_.max_failures) tally.done = true;
  }

  // The case's fixture, named by engine and seed, and by what failed when that is not
  // prefix (one case may fail several properties).
  std::filesystem::path save(const CheckFinding& finding) const {
    const EngineInfo& engine = *plan_.engines[finding.engine].info;
    Scenario scenario = check_case_scenario(plan_, finding.seed);
    std::string stem = check_fixture_stem(engine.name, finding.seed);
    // Appended piece by piece: g++ 12 at -O3 warns (-Wrestrict, a false positive) about
    // "literal" + std::string&&.
    if (finding.property && *finding.property != Property::prefix) {
      stem += '-';
      stem += property_name(*finding.property);
    } else if (!finding.property) {
      stem += '-';
      stem += std::string_view(finding.signature).substr(0, finding.signature.find('/'));
    }
    scenario.name = stem;
    stamp_failure(scenario, "check", engine.name, finding.property, finding.line);
    scenario.provenance.seed = finding.seed;
    const std::filesystem::path path = plan_.out / (stem + ".json");
    save_fixture(scenario, path);
    return path;
  }

  const CheckPlan& plan_;
  const CheckCallbacks& callbacks_;
  CheckResult result_;
  std::optional<TaskId> cursor_;  // the last task taken
  bool case_judged_ = false;      // the current case was judged on some engine
  int cases_done_ = 0;            // cases ended, judged or skipped by every engine
};

bool stopping(const CheckCallbacks& callbacks) {
  return callbacks.stop != nullptr && *callbacks.stop != 0;
}

class Progress {
 public:
  Progress(const CheckPlan& plan, const CheckCallbacks& callbacks)
      : plan_(plan), callbacks_(callbacks), start_(Clock::now()), last_(start_) {}

  void tick(const Gatherer& gatherer, const std::vector<TaskId>& busy) {
    if (!callbacks_.on_progress) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    CheckProgress progress;
    progress.cases_done = gatherer.cases_done();
    progress.cases_total = static_cast<int>(plan_.case_seeds.size());
    progress.findings = gatherer.findings();
    for (const TaskId& t : busy) {
      if (std::find(progress.engines_busy.begin(), progress.engines_busy.end(), t.engine) ==
          progress.engines_busy.end()) {
        progress.engines_busy.push_back(t.engine);
      }
    }
    std::sort(progress.engines_busy.begin(), progress.engines_busy.end());
    progress.seconds = std::chrono::duration<double>(now - start_).count();
    callbacks_.on_progress(progress);
  }

 private:
  const CheckPlan& plan_;
  const CheckCallbacks& callbacks_;
  Clock::time_point start_, last_;
};

CheckResult run_in_process(const CheckPlan& plan, const CheckCallbacks& callbacks) {
  Gatherer gatherer(plan, callbacks);
  Progress progress(plan, callbacks);
  check::CaseCache cache;
  while (const std::optional<TaskId> task = gatherer.next()) {
    if (stopping(callbacks)) {
      gatherer.result().interrupted = true;
      break;
    }
    gatherer.take(*task, check::judge_task(plan, *task, cache));
    progress.tick(gatherer, {*task});
  }
  return std::move(gatherer.result());
}

CheckResult run_in_workers(const CheckPlan& plan, const CheckCallbacks& callbacks) {
  Gatherer gatherer(plan, callbacks);
  Progress progress(plan, callbacks);
  check::WorkerPool pool(plan, std::max(1, plan.jobs));
  std::map<TaskId, TaskResult> results;  // arrived ahead of their turn
  std::optional<TaskId> handed;          // the last task handed out
  // How far ahead of the next result to take the workers may run. Tasks take from 10 ms
  // (a CPU engine) to 150 ms (a CUDA kernel on the SIMT launcher): with 8 per worker the
  // others stood idle behind a slow one; with 64 the quick start's check (`--engine every
  // --cases 1000 --jobs 2`) took 141 s wall for 265 CPU-seconds, against 168 s (256 per
  // worker: no faster). A result held is a few hundred bytes.
  const size_t ahead = static_cast<size_t>(std::max(1, plan.jobs)) * 64;
  for (;;) {
    if (stopping(callbacks)) {
      gatherer.result().interrupted = true;
      break;
    }
    const std::optional<TaskId> next = gatherer.next();
    if (!next) break;
    if (!handed || *handed < *next) handed = std::nullopt;  // nothing ahead of next was handed out
    while (pool.has_idle() && results.size() + pool.in_flight().size() < ahead) {
      const std::optional<TaskId> task = handed ? gatherer.next_after(handed) : next;
      if (!task) break;
      handed = task;
      pool.dispatch(*task);
    }
    for (auto& [task, result] : pool.collect(std::chrono::milliseconds(200))) {
      results.emplace(task, std::move(result));
    }
    // Take what is in order; drop what no longer counts.
    for (;;) {
      const std::optional<TaskId> due = gatherer.next();
      std::erase_if(results, [&](const auto& r) { return !due || r.first < *due; });
      if (!due) break;
      const auto it = results.find(*due);
      if (it == results.end()) break;
      gatherer.take(*due, it->second);
      results.erase(it);
    }
    // Between two tasks nothing may be in flight: the line then names the last one handed out.
    std::vector<TaskId> busy = pool.in_flight();
    if (busy.empty() && handed) busy.push_back(*handed);
    progress.tick(gatherer, busy);
  }
  return std::move(gatherer.result());
}

}  // namespace

CheckResult run_check_plan(const CheckPlan& plan, const CheckCallbacks& callbacks) {
  if (plan.engines.empty() || plan.case_seeds.empty()) return {};
  if (!plan.fork) return run_in_process(plan, callbacks);
  return run_in_workers(plan, callbacks);
}

}  // namespace kvfuzz
