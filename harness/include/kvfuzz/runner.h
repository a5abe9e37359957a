// The runner: feeds a scenario's program to an engine op by op, the way a real caller
// would, and collects the rows the engine returns with the positions it reported.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {

// A row the program implies: its key (from the runner's own logical bookkeeping, never
// from the engine) and where in the program it is produced. In program order.
struct ExpectedSlot {
  RowKey key;
  RowOrigin origin;
};

std::vector<ExpectedSlot> expected_slots(const Scenario& scenario);

struct EngineRun {
  std::vector<EngineRow> rows;        // in the order the engine returned them
  std::optional<std::string> error;   // the engine threw, or returned a wrongly shaped chunk
  std::optional<RowOrigin> error_at;  // op where it happened
};

EngineRun run_engine(const Scenario& scenario, const TokenTable& table, Engine& engine);

}  // namespace kvfuzz
