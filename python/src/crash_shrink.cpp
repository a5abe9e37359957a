#include "crash_shrink.h"

#include <fcntl.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "binding_support.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "fork_guard.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/shrink.h"
#include "sigint_guard.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

struct CrashShrunk {
  Scenario scenario;  // named and stamped; its note is the caller's
  int accepted = 0, tried = 0;
  bool timed_out = false;
};

// Whether a child's end is the one `signature` names: "crash/SIGSEGV" or "exit/3".
bool ends_as(int status, const std::string& signature) {
  if (signature.starts_with("crash/SIG") && WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    return abbrev != nullptr && signature.substr(9) == abbrev;
  }
  if (signature.starts_with("exit/") && WIFEXITED(status)) {
    return signature.substr(5) == std::to_string(WEXITSTATUS(status));
  }
  return false;
}

// In the child: every property judged on `candidate`, then a byte on `done` to say it got
// through (an engine may well _exit(0) itself), then _exit. Its output is dropped: each
// candidate that crashes would print its stack.
[[noreturn]] void judge_in_child(const Scenario& candidate, const EngineInfo& engine,
                                 const std::vector<Property>& properties, int done) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::signal(SIGINT, SIG_DFL);
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  for (const Property p : properties) {
    try {
      judge_property(p, candidate, engine);
    } catch (...) {  // an engine error is not the crash
    }
  }
  const char byte = 1;
  if (::write(done, &byte, 1) != 1) ::_exit(71);
  ::_exit(0);
}

bool still_crashes(const Scenario& candidate, const EngineInfo& engine,
                   const std::vector<Property>& properties, const std::string& signature,
                   std::chrono::milliseconds timeout) {
  if (interrupted()) return false;  // Ctrl-C: every candidate fails fast, the search ends
  int done[2];
  if (::pipe2(done, O_CLOEXEC) != 0) return false;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(done[0]);
    ::close(done[1]);
    return false;
  }
  if (pid == 0) {
    ::close(done[0]);
    judge_in_child(candidate, engine, properties, done[1]);
  }
  ::close(done[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  bool ended = false;
  while (!ended) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    ended = got == pid || (got < 0 && errno != EINTR);
    if (ended) break;
    if (std::chrono::steady_clock::now() >= deadline || interrupted()) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ::close(done[0]);
      return false;  // a hang is another failure
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char byte = 0;
  const bool completed = ::read(done[0], &byte, 1) == 1;
  ::close(done[0]);
  return !completed && ends_as(status, signature);
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
