// Findings by root cause (docs/check.md, "Known bugs"): two failures whose cases shrink to
// the same scenario (scenario_hash: its name, note and provenance left out) are one bug. Both
// doors settle their shrunk findings here, `kvfuzz check --known` (cli/check_known.cpp) and
// kvfuzz.check (python/kvfuzz/_check.py); replaying and shrinking stay each door's own (the
// command's forked workers, the Python door's in-process and forked calls), what a shrunk
// case means is decided once.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz {

// A bug already filed: one fixture of the known list, set aside while a run looks for others.
struct KnownBug {
  std::filesystem::path fixture;
  Scenario scenario;
  std::string cause;           // its root cause: scenario_hash of the fixture
  bool still_failing = false;  // the door's replay of it failed (or crashed) on an engine
  std::string failing_on;      // those engines, ", " between them; empty where not named
  int seen = 0;                // findings of this run that shrank to it, duplicates counted
  // Some engine of the run could be given it (its replay was judged, not skipped): a bug
  // no engine can be given says nothing about whether it was mended.
  bool judged = false;

  // "known, still failing: PATH (on E)", "known, now passing: PATH" or "known, not judged:
  // PATH (...)", and ", found again N times" once the run saw it.
  std::string state_line() const;
};

// What a finding's shrunk case is: a cause no earlier finding of its engine had, the cause of
// an earlier one (`first`: that finding's id), or a known bug (`first`: its index in known()).
struct Settled {
  enum class Kind { new_cause, same_cause, known };
  Kind kind = Kind::new_cause;
  size_t first = 0;
};

class RootCauses {
 public:
  // The fixtures `known` names: files, and every fixture below a folder. A path that is
  // neither: std::invalid_argument "known: PATH: expected a fixture file or a folder of
  // fixtures"; a malformed fixture: FixtureError, before anything runs.
  explicit RootCauses(const std::vector<std::filesystem::path>& known = {});

  std::vector<KnownBug>& known() { return known_; }
  const std::vector<KnownBug>& known() const { return known_; }
  // How many known bugs the door's replay found still failing.
  int still_failing() const;
  // How many more distinct findings a run of `properties` properties allows (its
  // max_failures grows by it): each known bug still failing may show through every one of
  // them (as different signatures), and none of those should end the run before it looks
  // for others.
  int room(size_t properties) const { return still_failing() * static_cast<int>(properties); }

  // Finding `id` (the door's numbering) of `engine`, whose case shrank to `shrunk`, seen
  // `count` times (1 + its duplicates): a known bug's (counted in its `seen`), else the
  // cause of the first finding of the engine that had it.
  Settled settle(std::string_view engine, const Scenario& shrunk, size_t id, int count);

 private:
  struct Cause {
    std::string engine, hash;
    size_t first;
  };
  std::vector<KnownBug> known_;
  std::vector<Cause> causes_;
};

}  // namespace kvfuzz
