#include "check_binding.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "binding_support.h"
#include "fork_guard.h"
#include "kvfuzz/check.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/root_causes.h"
#include "sigint_guard.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

// A finding as Python reads it (the stage's CheckFinding, its property as a name).
struct Finding {
  int case_number = 0;
  uint64_t seed = 0;
  std::string signature;
  std::optional<std::string> property;
  std::string line;
  std::string report;
  std::string fixture;
  int duplicates = 0;
  bool ignored = false;
};

Finding finding_of(const CheckFinding& f) {
  Finding out;
  out.case_number = f.case_number;
  out.seed = f.seed;
  out.signature = f.signature;
  if (f.property) out.property = std::string(property_name(*f.property));
  out.line = f.line;
  out.report = f.report;
  out.fixture = f.fixture.string();
  out.duplicates = f.duplicates;
  out.ignored = f.ignored;
  return out;
}

struct Run {
  int cases = 0;    // judged
  int skipped = 0;  // outside the engine's declarations
  std::string skipped_why;
  long rows = 0, unjudged = 0;
  double bound_used = 0;  // CheckEngineResult::bound_used
  int crashes = 0;
  std::map<std::string, int> failing;  // cases each chosen property failed on
  std::vector<Finding> findings;       // ignored ones too
  bool interrupted = false;
};

Run run_check(EngineHandle& engine, const std::vector<uint64_t>& case_seeds,
              const std::vector<std::string>& properties, const std::string& out, int jobs,
              bool fork, double timeout, int max_failures, const std::vector<std::string>& ignore,
              int max_tokens, int max_head_dim, int max_q_heads,
              std::function<void(const Finding&)> on_finding,
              std::function<void(int, int, int)> on_progress) {
  CheckPlan plan;
  plan.engines.push_back({engine.info, engine.declarations(fork)});
  plan.generator = generator_options(&engine, max_tokens, max_head_dim, max_q_heads, 0, 0);
  plan.case_seeds = case_seeds;
  plan.properties.clear();
  for (const std::string& name : properties) plan.properties.push_back(property_named(name));
  plan.jobs = jobs;
  plan.fork = fork;
  plan.timeout = seconds_to_ms(timeout);
  plan.max_failures = max_failures;
  plan.ignore = ignore;
  plan.out = out;

  // A callback's exception stops the plan and is raised once it has returned; declared
  // before the fork guard, so that it is let go with the GIL held.
  std::optional<nb::python_error> failed;
  const auto calling = [&](auto&& call) {
    nb::gil_scoped_acquire gil;  // released by the fork guard; held already without it
    if (failed) return;
    try {
      call();
    } catch (nb::python_error& e) {
      failed.emplace(std::move(e));
      *interrupted_flag() = 1;
    }
  };
  CheckCallbacks callbacks;
  if (on_finding) {
    callbacks.on_finding = [&](const CheckFinding& f) {
      calling([&] { on_finding(finding_of(f)); });
    };
  }
  if (on_progress) {
    callbacks.on_progress = [&](const CheckProgress& p) {
      calling([&] { on_progress(p.cases_done, p.cases_total, p.findings); });
    };
  }
  callbacks.stop = interrupted_flag();

  CheckResult result;
  {
    SigintGuard sigint;
    if (fork) {
      WorkersForkGuard guard;
      try {
        result = run_check_plan(plan, callbacks);
      } catch (...) {
        // Only a worker gets here by a bug: it must end, not run this process's Python.
        if (guard.in_worker()) ::_exit(70);
        throw;
      }
      if (guard.in_worker()) ::_exit(70);
    } else {
      result = run_check_plan(plan, callbacks);
    }
  }
  if (failed) {
    clear_interrupted();
    throw *failed;
  }
  raise_if_stopped();

  Run run;
  run.interrupted = result.interrupted;
  if (result.engines.empty()) return run;
  const CheckEngineResult& tally = result.engines.front();
  run.cases = tally.cases;
  run.skipped = tally.skipped;
  run.skipped_why = tally.skipped_why;
  run.rows = tally.rows;
  run.unjudged = tally.unjudged;
  run.bound_used = tally.bound_used;
  run.crashes = tally.crashes;
  for (const Property p : plan.properties) {
    run.failing[std::string(property_name(p))] = tally.failing[static_cast<size_t>(p)];
  }
  for (const CheckFinding& f : tally.findings) run.findings.push_back(finding_of(f));
  return run;
}

}  // namespace

void bind_check(nb::module_& m) {
  nb::class_<Finding>(m, "CheckFinding", "One thing that went wrong on one case")
      .def_ro("case_number", &Finding::case_number, "from 1")
      .def_ro("seed", &Finding::seed, "the case seed")
      .def_ro("signature", &Finding::signature)
      .def_ro("property", &Finding::property, "None for a crash, an exit, a timeout")
      .def_ro("line", &Finding::line)
      .def_ro("report", &Finding::report)
      .def_ro("fixture", &Finding::fixture, "the case as generated, written first")
      .def_ro("duplicates", &Finding::duplicates)
      .def_ro("ignored", &Finding::ignored);
  nb::class_<Run>(m, "CheckRun", "What run_check_plan found")
      .def_ro("cases", &Run::cases)
      .def_ro("skipped", &Run::skipped)
      .def_ro("skipped_why", &Run::skipped_why)
      .def_ro("rows", &Run::rows)
      .def_ro("unjudged", &Run::unjudged)
      .def_ro("bound_used", &Run::bound_used)
      .def_ro("crashes", &Run::crashes)
      .def_ro("failing", &Run::failing)
      .def_ro("findings", &Run::findings)
      .def_ro("interrupted", &Run::interrupted);
  // Findings by root cause (kvfuzz/root_causes.h), as `kvfuzz check --known` settles them.
  nb::class_<KnownBug>(m, "KnownBug", "A bug already filed: one fixture of the known list")
      .def_prop_ro("fixture", [](const KnownBug& k) { return k.fixture.string(); })
      .def_ro("cause", &KnownBug::cause, "its root cause: the fixture's scenario hash")
      .def_ro("still_failing", &KnownBug::still_failing)
      .def_ro("seen", &KnownBug::seen, "findings of this run that shrank to it")
      .def("state_line", &KnownBug::state_line);
  nb::class_<RootCauses>(m, "RootCauses",
                         "Known bugs and the root causes of a run's shrunk findings")
      .def(
          "__init__",
          [](RootCauses* self, const std::vector<std::string>& known) {
            new (self) RootCauses(std::vector<std::filesystem::path>(known.begin(), known.end()));
          },
          nb::arg("known"))
      .def_prop_ro(
          "known", [](const RootCauses& c) { return c.known(); }, "copies, in the list's order")
      .def(
          "mark_still_failing",
          [](RootCauses& c, size_t index) { c.known().at(index).still_failing = true; },
          nb::arg("index"), "the door's replay of known bug `index` failed")
      .def(
          "mark_judged", [](RootCauses& c, size_t index) { c.known().at(index).judged = true; },
          nb::arg("index"), "the door's replay of known bug `index` was judged, not skipped")
      .def("still_failing", &RootCauses::still_failing)
      .def("room", &RootCauses::room, nb::arg("properties"),
           "how many more distinct findings a run of that many properties allows")
      .def(
          "settle",
          [](RootCauses& c, const std::string& engine, const std::string& shrunk_fixture, size_t id,
             int count) {
            const Settled settled = c.settle(engine, load_fixture(shrunk_fixture), id, count);
            constexpr const char* kKind[] = {"new", "same", "known"};
            return std::pair<std::string, size_t>(kKind[static_cast<int>(settled.kind)],
                                                  settled.first);
          },
          nb::arg("engine"), nb::arg("shrunk_fixture"), nb::arg("id"), nb::arg("count"),
          "(\"new\" | \"same\" | \"known\", the first finding's id or the known bug's index)");
  m.def("run_check", &run_check, nb::arg("engine"), nb::arg("case_seeds"), nb::arg("properties"),
        nb::arg("out"), nb::kw_only(), nb::arg("jobs") = 1, nb::arg("fork") = true,
        nb::arg("timeout") = 600.0, nb::arg("max_failures") = 1,
        nb::arg("ignore") = std::vector<std::string>{}, nb::arg("max_tokens") = 0,
        nb::arg("max_head_dim") = 0, nb::arg("max_q_heads") = 0,
        nb::arg("on_finding").none() = nb::none(), nb::arg("on_progress").none() = nb::none());
}

}  // namespace kvfuzz::python
