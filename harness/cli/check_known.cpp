#include "check_known.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "cli_support.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/shrink.h"

namespace kvfuzz::cli {

RootCauses load_known(const std::vector<std::string>& paths) {
  try {
    return RootCauses(std::vector<std::filesystem::path>(paths.begin(), paths.end()));
  } catch (const std::invalid_argument& e) {
    // "known: PATH: expected ...", said as the option's: "--known PATH: expected ...".
    const std::string what = e.what();
    throw UsageError("--known " + what.substr(what.find(' ') + 1));
  }
}

int replay_known(RootCauses& causes, const CheckPlan& plan, const Isolation& isolation) {
  for (KnownBug& bug : causes.known()) {
    const Prepared prepared = prepare(bug.scenario);
    for (const CheckEngine& engine : plan.engines) {
      if (engine.info->mutant) continue;
      const FixtureReplay replay =
          replay_fixture(bug.scenario, prepared, *engine.info, engine.declared, isolation);
      if (replay.status != FixtureReplay::Status::skipped) bug.judged = true;
      if (replay.status == FixtureReplay::Status::fail ||
          replay.status == FixtureReplay::Status::crashed) {
        bug.still_failing = true;
        bug.failing_on += (bug.failing_on.empty() ? "" : ", ") + engine.info->name;
      }
    }
    std::printf("%s\n", bug.state_line().c_str());
  }
  std::fflush(stdout);
  return causes.room(plan.properties.size());
}

void settle_findings(RootCauses& causes, const CheckPlan& plan, CheckResult& result,
                     const Isolation& isolation, double seconds) {
  for (size_t e = 0; e < plan.engines.size(); ++e) {
    const CheckEngine& engine = plan.engines[e];
    if (engine.info->mutant) continue;
    std::vector<CheckFinding>& findings = result.engines[e].findings;
    for (size_t i = 0; i < findings.size(); ++i) {
      CheckFinding& finding = findings[i];
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
      const int count = 1 + finding.duplicates;
      const Settled settled = causes.settle(engine.info->name, smallest, i, count);
      const std::string head =
          finding.signature + " (case " + std::to_string(finding.case_number) + ")";
      if (settled.kind == Settled::Kind::known) {
        finding.known = causes.known()[settled.first].fixture;
        std::printf("%s shrinks to the known bug %s: set aside\n", head.c_str(),
                    finding.known.string().c_str());
        continue;
      }
      if (settled.kind == Settled::Kind::same_cause) {
        const CheckFinding& first = findings[settled.first];
        finding.same_cause_as =
            first.signature + " (case " + std::to_string(first.case_number) + ")";
        std::printf("%s shrinks to the case of %s: the same root cause\n", head.c_str(),
                    finding.same_cause_as.c_str());
        continue;
      }
      if (!shrunk) continue;
      // Beside the raw fixture, under the name a shrunk failure gets (and its provenance).
      Scenario kept = shrunk->scenario;
      kept.name =
          failure_fixture_stem(engine.info->name, *finding.property, shrunk->signature.kind, kept);
      stamp_failure(kept, "check", engine.info->name, *finding.property,
                    failure_line(shrunk->outcome));
      const std::filesystem::path path = finding.fixture.parent_path() / (kept.name + ".json");
      save_fixture(kept, path);
      std::printf("%s shrunk to %s%s\n", head.c_str(), path.string().c_str(),
                  causes.known().empty() ? "" : " (no known bug)");
    }
  }
  for (const KnownBug& bug : causes.known()) {
    if (bug.seen > 0) std::printf("%s\n", bug.state_line().c_str());
  }
  std::fflush(stdout);
}

}  // namespace kvfuzz::cli
