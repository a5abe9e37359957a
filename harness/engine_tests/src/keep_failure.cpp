// What a failing engine test leaves behind, in the order that loses nothing: the raw
// failing scenario first (a generated case exists nowhere else; a crash while shrinking
// keeps it), then the shrinker's result under the time budget, named and stamped as
// `kvfuzz shrink` names and stamps its results, so both tools give one case one file.
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "engine_tests_internal.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/shrink.h"

namespace kvfuzz::engine_tests {

namespace {

std::string size_text(const Scenario& s) {
  const size_t ops = s.program.size();
  const int tokens = program_tokens(s);
  return std::to_string(ops) + (ops == 1 ? " op, " : " ops, ") + std::to_string(tokens) +
         (tokens == 1 ? " token" : " tokens");
}

FailureKind kind_of(const PropertyOutcome& outcome) {
  return outcome.signature ? outcome.signature->kind : FailureKind::mismatch;
}

}  // namespace

std::string keep_failure(const FailingCase& failing, const EngineInfo& engine,
                         const EngineTestOptions& options) {
  const std::filesystem::path dir = std::filesystem::absolute(options.failures_dir);
  const PropertyOutcome& outcome = failing.outcome;
  std::ostringstream message;
  message << engine.name << " fails " << property_name(failing.property) << " on " << failing.where
          << ".\n";

  std::filesystem::path raw_path;
  if (failing.generated) {
    Scenario raw = failing.scenario;
    raw.name = failure_fixture_stem(engine.name, failing.property, kind_of(outcome), raw);
    stamp_failure(raw, "check", engine.name, failing.property, failure_line(outcome));
    raw_path = dir / "raw" / (raw.name + ".json");
    save_fixture(raw, raw_path);
  }

  ShrinkOptions shrink_options;
  shrink_options.property = failing.property;
  shrink_options.time_budget_seconds = options.shrink_seconds;
  const auto start = std::chrono::steady_clock::now();
  const std::optional<ShrinkResult> result = shrink(failing.scenario, engine, shrink_options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result) {
    message << "It failed once and passed when judged again: the engine is not deterministic.\n"
            << outcome.report;
    if (!raw_path.empty()) message << "\nraw fixture: " << raw_path.string();
    return message.str();
  }

  Scenario shrunk = result->scenario;
  shrunk.name = failure_fixture_stem(engine.name, failing.property, result->signature.kind, shrunk);
  char timing[96];
  std::snprintf(timing, sizeof timing, "%d of %d candidates accepted in %.1f s%s", result->accepted,
                result->candidates(), seconds,
                result->timed_out ? ", stopped at the time budget" : "");
  shrunk.note = "Shrunk by the kvfuzz engine tests from " + size_text(failing.scenario) + " to " +
                size_text(shrunk) + " (" + timing + "). Fails " + to_string(result->signature) +
                " on " + engine.name + ": " + failure_line(result->outcome);
  stamp_failure(shrunk, "shrink", engine.name, failing.property, failure_line(result->outcome));
  const std::filesystem::path path = dir / (shrunk.name + ".json");
  save_fixture(shrunk, path);

  message << "Shrunk from " << size_text(failing.scenario) << " to " << size_text(shrunk) << " ("
          << timing << "). The shrunk case:\n"
          << result->outcome.report;
  if (!result->outcome.report.empty() && result->outcome.report.back() != '\n') message << '\n';
  message << "shrunk fixture: " << path.string() << "\n";
  if (!raw_path.empty()) message << "raw fixture: " << raw_path.string() << "\n";
  message << "kvfuzz's own engines pass it; replay it there with\n  " << options.kvfuzz_command
          << " replay " << path.string() << " --engine contiguous\n"
          << "and keep it as a regression test of " << engine.name
          << ": copy it into the engine's corpus directory.";
  return message.str();
}

}  // namespace kvfuzz::engine_tests
