// The runner: feeds a scenario's program to an engine op by op, the way a real caller
// would, and collects the rows the engine returns with the positions it reported.
#pragma once

#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {

std::vector<ExpectedSlot> expected_slots(const Scenario& scenario);

EngineRun run_engine(const Scenario& scenario, const TokenTable& table, Engine& engine);

}  // namespace kvfuzz
