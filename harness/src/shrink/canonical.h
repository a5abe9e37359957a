// The canonical form of a shrunk scenario (internal to harness/src/shrink/): what the search
// applies after its moves, whatever stopped it, rather than a move competing for its budget.
#pragma once

#include <optional>

#include "kvfuzz/scenario.h"

namespace kvfuzz::shrinking {

// `s` with the token-table entries its program never uses dropped and the rest numbered in
// order of first use (an explicit table), or a generated table cut to the ids used (its
// values are drawn in id order, so the ids kept keep their values). The engine and the
// reference see the same values at every position, so the failure is the same; nothing
// (nullopt) when `s` is already so, or at model level (there ids are vocabulary words).
std::optional<Scenario> canonical_form(const Scenario& s);

// `s` (a shrunk scenario with an explicit table) with the generated table of `input` (its
// seed and count, cut to the ids used) instead: a much shorter text where the values were
// not what failed (a crash on a reset, say). Nothing unless `input`'s table is generated
// and `s`'s explicit. The values differ from `s`'s, so the search judges it.
std::optional<Scenario> with_generated_table(const Scenario& s, const Scenario& input);

}  // namespace kvfuzz::shrinking
