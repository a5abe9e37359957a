#include "check_known.h"

#include <cstdio>
#include <string>

#include "cli_support.h"
#include "corpus/fixture_files.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/shrink.h"

namespace kvfuzz::cli {

std::vector<KnownBug> load_known(const std::vector<std::string>& paths) {
  std::vector<KnownBug> known;
  const auto add = [&](const std::filesystem::path& file) {
    KnownBug bug;
    bug.fixture = file;
    bug.scenario = load_fixture(file.string());
    bug.cause = scenario_hash(bug.scenario);
    known.push_back(std::move(bug));
  };
  for (const std::string& path : paths) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      for (const std::filesystem::path& file : fixtures_below(path)) add(file);
    } else if (std::filesystem::is_regular_file(path, error)) {
      add(path);
    } else {
      throw UsageError("--known " + path + ": expected a fixture file or a folder of fixtures");
    }
  }
  return known;
}

int replay_known(std::vector<KnownBug>& known, const CheckPlan& plan, const Isolation& isolation) {
  int still_failing = 0;
  for (KnownBug& bug : known) {
    const Prepared prepared = prepare(bug.scenario);
    std::string engines;
    for (const CheckEngine& engine : plan.engines) {
      if (engine.info->mutant) continue;
      const FixtureReplay replay =
          replay_fixture(bug.scenario, prepared, *engine.info, engine.declared, isolation);
      if (replay.status == FixtureReplay::Status::fail ||
          replay.status == FixtureReplay::Status::crashed) {
        bug.still_failing = true;
        engines += (engines.empty() ? "" : ", ") + engine.info->name;
      }
    }
    still_failing += bug.still_failing ? 1 : 0;
    std::printf("%s: %s\n", bug.still_failing ? "known, still failing" : "known, now passing",
                (bug.fixture.string() + (engines.empty() ? "" : " (on " + engines + ")")).c_str());
  }
  std::fflush(stdout);
  return still_failing;
}

void set_aside_known(std::vector<KnownBug>& known, const CheckPlan& plan, CheckResult& result,
                     const Isolation& isolation, double seconds) {
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    const CheckEngine& engine = plan.engines[e];
    if (engine.info->mutant) continue;
    for (CheckFinding& finding : result.engines[e].findings) {
      if (finding.ignored || !finding.property) continue;  // a crash's raw case is its cause
      ShrinkOptions options;
      options.property = *finding.property;
      options.time_budget_seconds = seconds;
      options.declared = engine.declared;
      options.judge = [&](Property p, const Scenario& candidate) {
        return judge_property(p, candidate, *engine.info, isolation);
      };
      const Scenario raw = load_fixture(finding.fixture.string());
      const std::optional<ShrinkResult> shrunk = shrink(raw, *engine.info, options);
      const Scenario& smallest = shrunk ? shrunk->scenario : raw;
      const std::string cause = scenario_hash(smallest);
      for (KnownBug& bug : known) {
        if (bug.cause != cause) continue;
        finding.known = bug.fixture;
        bug.seen += 1 + finding.duplicates;
        break;
      }
      if (!finding.known.empty()) {
        std::printf("%s (case %d) shrinks to the known bug %s: set aside\n",
                    finding.signature.c_str(), finding.case_number, finding.known.string().c_str());
      } else if (shrunk) {
        // Beside the raw fixture, under the name a shrunk failure gets (and its provenance).
        Scenario kept = shrunk->scenario;
        kept.name = failure_fixture_stem(engine.info->name, *finding.property,
                                         shrunk->signature.kind, kept);
        stamp_failure(kept, "check", engine.info->name, *finding.property,
                      failure_line(shrunk->outcome));
        const std::filesystem::path path = finding.fixture.parent_path() / (kept.name + ".json");
        save_fixture(kept, path);
        std::printf("%s (case %d) is no known bug; shrunk to %s\n", finding.signature.c_str(),
                    finding.case_number, path.string().c_str());
      }
    }
  }
  std::fflush(stdout);
}

}  // namespace kvfuzz::cli
