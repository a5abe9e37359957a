#include "crash_shrink.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "binding_support.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "fork_guard.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/shrink.h"
#include "sigint_guard.h"
#include "support/isolated_call.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

struct CrashShrunk {
  Scenario scenario;  // named and stamped; its note is the caller's
  int accepted = 0, tried = 0;
  bool timed_out = false;
};

// In a child (call_isolated): every property judged on `candidate` (an engine error is not
// the crash), then an empty answer: the child got through. A child that ends without one
// crashed, exited or hung; it still crashes when it ends as `signature` says.
bool still_crashes(const Scenario& candidate, const EngineInfo& engine,
                   const std::vector<Property>& properties, const std::string& signature,
                   std::chrono::milliseconds timeout) {
  if (interrupted()) return false;  // Ctrl-C: every candidate fails fast, the search ends
  const IsolatedAnswer answer = call_isolated(
      [&] {
        for (const Property p : properties) {
          try {
            judge_property(p, candidate, engine);
          } catch (...) {
          }
        }
        return std::string();
      },
      timeout);
  return answer.ended && answer.ended->signature == signature;  // a hang is another failure
}

std::optional<CrashShrunk> shrink_crash(const Scenario& failing, EngineHandle& engine,
                                        const std::string& signature,
                                        const std::vector<std::string>& property_names,
                                        double seconds, double timeout, const std::string& line) {
  if (!signature.starts_with("crash/") && !signature.starts_with("exit/")) {
    throw nb::value_error(
        ("shrink_crash: expected a crash/ or exit/ signature, got '" + signature + "'").c_str());
  }
  std::vector<Property> properties;
  for (const std::string& name : property_names) properties.push_back(property_named(name));
  const auto per_candidate = seconds_to_ms(timeout);
  ShrinkOptions options;
  options.time_budget_seconds = seconds;
  std::optional<ShrinkResult> result;
  {
    SigintGuard sigint;
    WorkersForkGuard guard;  // the GIL is the children's while they judge
    try {
      result = shrink_with(
          failing,
          [&](const Scenario& candidate) {
            return still_crashes(candidate, *engine.info, properties, signature, per_candidate);
          },
          options);
    } catch (...) {
      if (guard.in_worker()) ::_exit(70);
      throw;
    }
  }
  raise_if_stopped();
  if (!result) return std::nullopt;
  CrashShrunk out;
  out.scenario = result->scenario;
  out.scenario.name = file_safe_name(engine.info->name) + "-" + file_safe_name(signature) + "-" +
                      scenario_hash(out.scenario);
  stamp_failure(out.scenario, "shrink", engine.info->name, std::nullopt, line);
  out.accepted = result->accepted;
  out.tried = result->tried;
  out.timed_out = result->timed_out;
  return out;
}

}  // namespace

void bind_crash_shrink(nb::module_& m) {
  nb::class_<CrashShrunk>(m, "CrashShrunk")
      .def_ro("scenario", &CrashShrunk::scenario)
      .def_ro("accepted", &CrashShrunk::accepted)
      .def_ro("tried", &CrashShrunk::tried)
      .def_ro("timed_out", &CrashShrunk::timed_out);
  m.def("shrink_crash", &shrink_crash, nb::arg("scenario"), nb::arg("engine"), nb::arg("signature"),
        nb::arg("properties"), nb::arg("seconds"), nb::arg("timeout"), nb::arg("failure"));
}

}  // namespace kvfuzz::python
