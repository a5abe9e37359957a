// The search with a chosen list of moves (internal to harness/src/shrink/): shrink() is
// this with every move of moves(); a test leaves one out to measure what it adds.
#pragma once

#include <optional>
#include <vector>

#include "kvfuzz/shrink.h"
#include "shrink/moves.h"

namespace kvfuzz::shrinking {

// shrink(failing, engine, options), trying only `moves` (in their order), then the split
// lookahead. The result has one count row per move given.
std::optional<ShrinkResult> shrink_with_moves(const Scenario& failing, const EngineInfo& engine,
                                              const ShrinkOptions& options,
                                              const std::vector<Move>& moves);

}  // namespace kvfuzz::shrinking
