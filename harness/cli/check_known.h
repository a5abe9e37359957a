// kvfuzz check --known PATH: bugs already filed, set aside while the run looks for others
// (docs/check.md, "Known bugs"). Each known fixture is replayed first on every honest engine
// and said to be "known, still failing" or "known, now passing"; after the run, each
// property finding is shrunk (--shrink-seconds) and one that shrinks to a known fixture's
// root cause (scenario_hash: the scenario without its name, note and provenance) is set
// aside, counted on the known bug, instead of failing the run. The Python door's check does
// the same with known= (python/kvfuzz/_check.py), with the same root cause.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kvfuzz/check.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::cli {

struct KnownBug {
  std::filesystem::path fixture;
  Scenario scenario;
  std::string cause;           // scenario_hash
  bool still_failing = false;  // on some engine of the run
  int seen = 0;                // findings of this run that shrank to it
};

// The fixtures `paths` name (files, and every fixture below a folder), loaded: a malformed
// one is bad input (FixtureError), a path that is neither a UsageError.
std::vector<KnownBug> load_known(const std::vector<std::string>& paths);

// Replays each known bug on every honest engine of the plan and prints one line for it;
// returns how many still fail (the run's max_failures grows by it, so that a known bug found
// again does not end the run before it looks for others).
int replay_known(std::vector<KnownBug>& known, const CheckPlan& plan, const Isolation& isolation);

// Shrinks every property finding of an honest engine (at most `seconds` each), and marks the
// ones whose shrunk scenario is a known bug's (CheckFinding::known), printing one line each;
// a shrunk finding that is no known bug is written beside its raw fixture.
void set_aside_known(std::vector<KnownBug>& known, const CheckPlan& plan, CheckResult& result,
                     const Isolation& isolation, double seconds);

}  // namespace kvfuzz::cli
