// kvfuzz replay FIXTURE|DIR...: every fixture against the chosen engines, one line each,
// then a summary line per directory.
//
// Exit status 1 (a mismatch) is a well-formed fixture that fails: an engine's rows differ
// from the reference, or the reference differs from the fixture's hand-written `expect`
// values. Exit status 2 (bad input) is a fixture that does not parse or validate, `expect`
// rows included (a key the program does not produce, the wrong number of heads or values):
// such a file states nothing that could be judged.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli_support.h"
#include "commands.h"
#include "corpus/provenance.h"
#include "judge/report.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"

namespace kvfuzz::cli {

namespace {

struct ReplayOptions {
  std::vector<std::string> paths;
  std::string engines = "all";
};

enum class FixtureResult { pass, mismatch, bad_input, skipped };

void print_indented(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    std::printf("    %s\n", text.substr(start, end - start).c_str());
    start = end + 1;
  }
}

// What each engine announces, asked once per run (an exec engine starts a process).
using Capabilities = std::map<const EngineInfo*, EngineDeclarations>;

FixtureResult replay_one(const std::filesystem::path& file,
                         const std::vector<std::shared_ptr<const EngineInfo>>& engines,
                         const Capabilities& capabilities) {
  Scenario scenario;
  try {
    scenario = load_fixture(file);
  } catch (const FixtureError& e) {
    std::printf("BAD  %s\n", file.string().c_str());
    std::fprintf(stderr, "%s\n", e.what());
    return FixtureResult::bad_input;
  }
  const Prepared prepared = prepare(scenario);
  if (auto problem = judge_expect(scenario, prepared)) {
    std::printf("FAIL %s: the reference disagrees with the fixture's expect rows\n",
                file.string().c_str());
    print_indented(*problem);
    return FixtureResult::mismatch;
  }
  // The property a regression was shrunk under (prefix when none is recorded).
  const Property recorded = recorded_property(scenario);
  std::string failed;
  std::string reports;
  std::string skipped;
  int unjudged = 0;
  size_t ran = 0;
  for (const std::shared_ptr<const EngineInfo>& engine : engines) {
    // A program the engine cannot be given (an operation it does not announce, a layout
    // outside its supports) says nothing about it.
    if (const auto why = unjudgeable(scenario, capabilities.at(engine.get()))) {
      skipped += (skipped.empty() ? "" : "; ") + engine->name + ": the fixture " + *why;
      continue;
    }
    ++ran;
    std::string report;
    if (scenario.model) {
      // Model level: the logits (and the diverging layer) through judge_property.
      const PropertyOutcome prefix = judge_property(Property::prefix, scenario, *engine);
      if (!prefix.pass) report = prefix.report;
    } else {
      const CheckOutcome outcome = judge_engine(scenario, prepared, *engine);
      unjudged = std::max(unjudged, outcome.verdict.rows_unjudged);
      if (!outcome.verdict.pass) report = describe_divergence(*outcome.verdict.first);
    }
    if (report.empty() && recorded != Property::prefix) {
      // A regression shrunk under another property is replayed under that property too.
      const PropertyOutcome property = judge_property(recorded, scenario, *engine);
      if (!property.pass) report = property.report;
    }
    if (report.empty()) continue;
    failed += (failed.empty() ? "" : ", ") + engine->name;
    reports += engine->name + ": " + report;
    if (reports.back() != '\n') reports += '\n';
  }
  if (ran == 0) {
    std::printf("skip %s: %s\n", file.string().c_str(), skipped.c_str());
    return FixtureResult::skipped;
  }
  if (failed.empty()) {
    std::printf("ok   %s (%zu %s, %zu engines)\n", file.string().c_str(), prepared.slots.size(),
                scenario.model ? "logits rows" : "rows", ran);
    if (!skipped.empty()) std::printf("     skipped: %s\n", skipped.c_str());
    if (unjudged > 0) {
      std::printf(
          "     warning: %d rows only checked for finiteness: their tolerance reaches the largest "
          "|v| they see (scores too large for f32 accumulation)\n",
          unjudged);
    }
    return FixtureResult::pass;
  }
  std::printf("FAIL %s: %s\n", file.string().c_str(), failed.c_str());
  print_indented(reports);
  return FixtureResult::mismatch;
}

int run_replay(const ReplayOptions& options) {
  const auto engines = select_engines(options.engines);
  Capabilities capabilities;
  for (const auto& engine : engines) {
    try {
      capabilities[engine.get()] = probe_declarations(*engine);
    } catch (const EngineError& e) {
      throw UsageError(std::string("--engine: ") + e.what());
    }
  }
  // Every fixture of every path, in the order given, each file once.
  std::vector<std::filesystem::path> files;
  std::set<std::filesystem::path> seen;
  for (const std::string& path : options.paths) {
    const auto found = find_fixtures(path);
    if (found.empty()) throw UsageError(path + ": no *.json fixtures found");
    for (const auto& file : found) {
      if (seen.insert(std::filesystem::weakly_canonical(file)).second) files.push_back(file);
    }
  }

  struct Tally {
    int total = 0, passed = 0, failed = 0, bad = 0, skipped = 0;
  };
  std::map<std::string, Tally> by_directory;
  for (const auto& file : files) {
    const std::string directory = file.parent_path().string();
    Tally& tally = by_directory[directory.empty() ? "." : directory];
    ++tally.total;
    switch (replay_one(file, engines, capabilities)) {
      case FixtureResult::pass:
        ++tally.passed;
        break;
      case FixtureResult::mismatch:
        ++tally.failed;
        break;
      case FixtureResult::bad_input:
        ++tally.bad;
        break;
      case FixtureResult::skipped:
        ++tally.skipped;
        break;
    }
  }
  Tally all;
  for (const auto& [directory, tally] : by_directory) {
    std::printf("%s: %d fixtures, %d passed, %d failed, %d bad", directory.c_str(), tally.total,
                tally.passed, tally.failed, tally.bad);
    if (tally.skipped > 0)
      std::printf(", %d skipped (not judgeable by an engine, as said above)", tally.skipped);
    std::printf("\n");
    all.failed += tally.failed;
    all.bad += tally.bad;
  }
  if (all.bad > 0) return kExitBadInput;
  return all.failed > 0 ? kExitMismatch : kExitPass;
}

}  // namespace

void add_replay_command(CLI::App& app, int& exit_status) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Replay fixtures (files, and every *.json under directories) against engines.\n"
      "Exit status: 0 all pass; 1 a mismatch: an engine's row differs from the reference, or\n"
      "the reference differs from a value of the fixture's hand-written expect rows; 2 bad\n"
      "input: a flag, an engine, or a malformed fixture (one that does not parse or validate,\n"
      "such as an expect row at a key its program does not produce or of the wrong shape).");
  cmd->add_option("fixtures", options->paths, "Fixture files or directories, one or more")
      ->required();
  cmd->add_option("--engine", options->engines, kEnginesHelp)->default_val("all");
  cmd->callback([options, &exit_status] { exit_status = run_replay(*options); });
}

}  // namespace kvfuzz::cli
