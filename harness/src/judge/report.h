// Human-readable reports: the first divergence, and `explain`'s per-row table.
#pragma once

#include <string>

#include "judge/compare.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// The shortest %g form that reads back as the same double, so that two numbers that
// differ never print alike ("7.5", "12.4", "0.30000000000000004").
std::string format_exact(double x);

// Several lines naming the first diverging row: sequence, epoch, absolute position,
// q head, dim, got, expected, error, bound, and the keys that row should see.
std::string describe_divergence(const Divergence& divergence);

// One line per expected row: seq, epoch, pos, visible keys, expected and got per q head
// (first values of each head), and whether it passes. In program order.
std::string explain_rows(const Scenario& scenario, const Prepared& prepared,
                         const CheckOutcome& outcome);

}  // namespace kvfuzz
