// Human-readable reports: the first divergence, and `explain`'s per-row table.
#pragma once

#include <string>

#include "kvfuzz/check.h"
#include "kvfuzz/compare.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Several lines naming the first diverging row: sequence, epoch, absolute position,
// q head, dim, got, expected, error, bound, and the keys that row should see.
std::string describe_divergence(const Divergence& divergence);

// One line per expected row: seq, epoch, pos, visible keys, expected and got per q head
// (first values of each head), and whether it passes. In program order.
std::string explain_rows(const Scenario& scenario, const Prepared& prepared,
                         const CheckOutcome& outcome);

}  // namespace kvfuzz
