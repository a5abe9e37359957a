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

// "Shrunk from 9 ops, 120 tokens to 2 ops, 2 tokens (...)", or, when no candidate was
// accepted, that the case was minimal already for the shrinker's moves.
std::string shrink_summary(const Scenario& before, const Scenario& after,
                           const ShrinkResult& result, const std::string& timing) {
  if (result.accepted == 0) {
    return "Already minimal for the shrinker's moves: " + size_text(before) + " (" + timing + ").";
  }
  if (size_text(before) == size_text(after)) {
    return "Shrunk at the same size, " + size_text(after) +
           ", to smaller values or a smaller layout (" + timing + ").";
  }
  return "Shrunk from " + size_text(before) + " to " + size_text(after) + " (" + timing + ").";
}

// The commands that run the fixture at `path` from the command line: on the engine itself
// when it has a plugin (options.engine_spec), and on kvfuzz's own contiguous engine.
std::string commands(const EngineInfo& engine, const EngineTestOptions& options,
                     const std::filesystem::path& path) {
  const std::string& kvfuzz = options.kvfuzz_command;
  std::ostringstream out;
  if (!options.engine_spec.empty()) {
    out << "replay it on " << engine.name << " with\n  " << kvfuzz << " replay " << path.string()
        << " --engine " << options.engine_spec << "\nand see every row with\n  " << kvfuzz
        << " explain " << path.string() << " --engine " << options.engine_spec << "\n";
  } else {
    out << "to replay it on " << engine.name
        << " from the command line, build the engine as a plugin too "
           "(kvfuzz_add_engine_plugin, docs/writing-an-engine.md): these messages then name it\n";
  }
  out << "kvfuzz's own engines pass it:\n  " << kvfuzz << " replay " << path.string()
      << " --engine contiguous\n";
  return out.str();
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
  const bool generated = failing.corpus_fixture.empty();
  if (generated) {
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
  char timing[192];
  std::snprintf(timing, sizeof timing, "%d of %d candidates accepted in %.1f s%s", result->accepted,
                result->candidates(), seconds, stop_phrase(*result).c_str());
  const std::string summary = shrink_summary(failing.scenario, shrunk, *result, timing);
  shrunk.note = "By the kvfuzz engine tests. " + summary + " Fails " +
                to_string(result->signature) + " on " + engine.name + ": " +
                failure_line(result->outcome);
  stamp_failure(shrunk, "shrink", engine.name, failing.property, failure_line(result->outcome));
  const std::filesystem::path path = dir / (shrunk.name + ".json");
  save_fixture(shrunk, path);

  message << summary << " The shrunk case:\n" << result->outcome.report;
  if (!result->outcome.report.empty() && result->outcome.report.back() != '\n') message << '\n';
  message << "shrunk fixture: " << path.string() << "\n";
  if (!raw_path.empty()) message << "raw fixture: " << raw_path.string() << "\n";
  message << commands(engine, options, path);
  if (generated) {
    message << "Keep it as a regression test of " << engine.name
            << ": copy it into the engine's corpus directory.";
  } else {
    // A corpus fixture is a regression test already: the one that caught this.
    message << "The failing fixture is a regression test of " << engine.name
            << " already, in its corpus: " << failing.corpus_fixture.string();
  }
  return message.str();
}

}  // namespace kvfuzz::engine_tests
