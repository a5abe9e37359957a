// One straight line: scenario -> run -> compare -> verdict. Every entry point (replay,
// check, tests, benchmarks) goes through these functions.
#pragma once

#include <optional>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"
#include "kvfuzz/verdict.h"

namespace kvfuzz {

// What does not depend on the engine beyond its declared numerics: the token table, the
// program's row slots and the reference rows with their bounds for those numerics.
// Prepared once per scenario, shared by every engine that declares the same numerics.
struct Prepared {
  TokenTable table;
  std::vector<ExpectedSlot> slots;
  ReferenceMap reference;
  EngineNumerics numerics;
};

Prepared prepare(const Scenario& scenario, const EngineNumerics& numerics = {});

struct CheckOutcome {
  Verdict verdict;
  EngineRun run;
  double engine_seconds = 0;
  double compare_seconds = 0;
};

// Judges `engine` on `scenario`. When the engine declares other numerics than `prepared`
// was made for, the scenario is prepared again for them (correct, only slower: callers
// that judge many engines keep one Prepared per numerics).
CheckOutcome judge_engine(const Scenario& scenario, const Prepared& prepared,
                          const EngineInfo& engine);

// The fixture's hand-derived `expect` rows against the reference: a message naming the
// first disagreement, or nothing when all agree (to 1e-9 relative).
std::optional<std::string> judge_expect(const Scenario& scenario, const Prepared& prepared);

}  // namespace kvfuzz
