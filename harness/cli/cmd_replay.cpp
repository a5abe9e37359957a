// kvfuzz replay FIXTURE|DIR...: every fixture against the chosen engines (replay_fixture,
// kvfuzz/orchestrate.h), one line each, then the skips once per engine and reason, then a
// summary line per directory.
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
#include "isolation_flags.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/orchestrate.h"

namespace kvfuzz::cli {

namespace {

struct ReplayOptions {
  std::vector<std::string> paths;
  std::string engines = "all";
  IsolationFlags isolation;  // --timeout (per fixture and engine), --no-fork
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
using Declarations = std::map<const EngineInfo*, EngineDeclarations>;

// The skips of a run, printed once per reason at the end rather than once per fixture:
// for each reason, the fixtures each engine skipped for it.
using Skips = std::map<std::string, std::map<std::string, int>>;

FixtureResult replay_one(const std::filesystem::path& file,
                         const std::vector<std::shared_ptr<const EngineInfo>>& engines,
                         const Declarations& declarations, const Isolation& isolation,
                         Skips& skips) {
  Scenario scenario;
  try {
    scenario = load_fixture(file);
  } catch (const FixtureError& e) {
    std::printf("BAD  %s\n", file.string().c_str());
    std::fprintf(stderr, "%s\n", e.what());
    return FixtureResult::bad_input;
  }
  const Prepared prepared = prepare(scenario);
  std::string failed;
  std::string reports;
  int unjudged = 0;
  size_t ran = 0;
  for (const std::shared_ptr<const EngineInfo>& engine : engines) {
    const FixtureReplay replay =
        replay_fixture(scenario, prepared, *engine, declarations.at(engine.get()), isolation);
    switch (replay.status) {
      case FixtureReplay::Status::wrong_expect:
        std::printf("FAIL %s: the reference disagrees with the fixture's expect rows\n",
                    file.string().c_str());
        print_indented(replay.detail);
        return FixtureResult::mismatch;
      case FixtureReplay::Status::skipped:
        ++skips["the fixture " + replay.detail][engine->name];
        continue;
      case FixtureReplay::Status::pass:
        ++ran;
        unjudged = std::max(unjudged, replay.outcome.rows_unjudged);
        continue;
      case FixtureReplay::Status::fail:
      case FixtureReplay::Status::crashed:  // the next engine and fixture still run
        ++ran;
        failed += (failed.empty() ? "" : ", ") + engine->name;
        if (replay.status == FixtureReplay::Status::crashed) {
          reports += engine->name + ": " + replay.crash_signature + ": ";
        }
        reports += replay.detail;
        if (reports.back() != '\n') reports += '\n';
        continue;
    }
  }
  if (ran == 0) {
    std::printf("skip %s: no engine can be given it (why: below)\n", file.string().c_str());
    return FixtureResult::skipped;
  }
  if (failed.empty()) {
    std::printf("ok   %s (%zu %s, %zu engines)\n", file.string().c_str(), prepared.slots.size(),
                scenario.model ? "logits rows" : "rows", ran);
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

// One line per reason and fixture count: "flash-bf16, flash-f16 skipped 42 fixtures each:
// the fixture lies outside ...".
void print_skips(const Skips& skips) {
  for (const auto& [reason, by_engine] : skips) {
    std::map<int, std::string> by_count;
    for (const auto& [engine, count] : by_engine) {
      std::string& names = by_count[count];
      names += (names.empty() ? "" : ", ") + engine;
    }
    for (const auto& [count, names] : by_count) {
      const bool several = names.find(',') != std::string::npos;
      std::printf("%s skipped %d fixture%s%s: %s\n", names.c_str(), count, count == 1 ? "" : "s",
                  several ? " each" : "", reason.c_str());
    }
  }
}

int run_replay(const ReplayOptions& options) {
  const auto engines = select_engines(options.engines);
  const Isolation isolation = options.isolation.isolation();
  Declarations declarations;
  for (const auto& engine : engines) {
    declarations[engine.get()] = declarations_of(*engine, options.isolation);
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
  Skips skips;
  for (const auto& file : files) {
    const std::string directory = file.parent_path().string();
    Tally& tally = by_directory[directory.empty() ? "." : directory];
    ++tally.total;
    switch (replay_one(file, engines, declarations, isolation, skips)) {
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
  print_skips(skips);
  Tally all;
  for (const auto& [directory, tally] : by_directory) {
    std::printf("%s: %d fixtures, %d passed, %d failed, %d bad", directory.c_str(), tally.total,
                tally.passed, tally.failed, tally.bad);
    if (tally.skipped > 0)
      std::printf(", %d skipped (no engine can be given them, as said above)", tally.skipped);
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
      "such as an expect row at a key its program does not produce or of the wrong shape); 3 an\n"
      "engine crashed or hung while it was made. An engine that crashes or hangs on a fixture\n"
      "fails that fixture (1), and the others still run.");
  cmd->add_option("fixtures", options->paths, "Fixture files or directories, one or more")
      ->required();
  cmd->add_option("--engine", options->engines, kEnginesHelp)->default_val("all");
  add_isolation_options(*cmd, options->isolation,
                        "Seconds one fixture may take on one engine (prefix and its recorded "
                        "property) before its child is killed and the fixture fails as a hang",
                        "Replay in this process, not in a forked child: no crash isolation and "
                        "no --timeout, but a debugger sees the engine");
  cmd->callback([options, &exit_status] { exit_status = run_replay(*options); });
}

}  // namespace kvfuzz::cli
