// kvfuzz check --known PATH: bugs already filed, set aside while the run looks for others
// (docs/check.md, "Known bugs"). Each known fixture is replayed first on every honest engine
// and said to be "known, still failing" or "known, now passing"; after the run, each
// property finding is shrunk (--shrink-seconds) and settled by its root cause (RootCauses,
// kvfuzz/root_causes.h, which the Python door's check settles with too): one that shrinks to
// a known bug is set aside, counted on it; one that shrinks to the case of an earlier finding
// of its engine is that finding's cause seen again (CheckFinding::same_cause_as).
#pragma once

#include <string>
#include <vector>

#include "kvfuzz/check.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/root_causes.h"

namespace kvfuzz::cli {

// The fixtures `paths` name (files, and every fixture below a folder), loaded: a malformed
// one is bad input (FixtureError), a path that is neither a UsageError.
RootCauses load_known(const std::vector<std::string>& paths);

// Replays each known bug on every honest engine of the plan and prints one line for it;
// returns RootCauses::room, by which the run's max_failures grows.
int replay_known(RootCauses& causes, const CheckPlan& plan, const Isolation& isolation);

// Shrinks every property finding of an honest engine (at most `seconds` each), writes the
// shrunk case beside its raw fixture and settles it (RootCauses::settle), printing one line
// each, then the known bugs' lines again with what the run saw of them.
void settle_findings(RootCauses& causes, const CheckPlan& plan, CheckResult& result,
                     const Isolation& isolation, double seconds);

}  // namespace kvfuzz::cli
