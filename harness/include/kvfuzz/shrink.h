// The scenario shrinker: reduces a failing scenario to a local minimum that fails with the
// same signature (same property, same kind of divergence), so shrinking never wanders onto
// another bug. It works on scenarios, not bytes: drop ops, sequences and tokens; merge and
// split chunks; drop resets that do not matter; reduce heads to the smallest layout that
// still fails; head_dim to 1; page size; values toward 0 and small integers.
//
// Each kind of change is a named move, tried in a fixed order; the result counts, per
// move, the candidates judged, accepted and skipped. A candidate equal to one already
// rejected is not judged again (the judgement is deterministic, so the answer would be
// the same): that only saves time, it never changes the result.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct ShrinkProgress {
  int accepted = 0;      // candidates that kept the failure
  int tried = 0;         // candidates judged
  int skipped_seen = 0;  // candidates not judged: equal to one rejected before
  double seconds = 0;
  const Scenario* best = nullptr;
  std::string_view move;  // the move whose candidate was just accepted, e.g. "drop tokens"
};

// What one move did over a whole shrink. A candidate that reaches judgement (smaller than
// the best so far and valid) is either judged (`tried`) or skipped as seen; of those
// judged, `accepted` kept the failure.
struct MoveCounts {
  std::string move;  // its name, as in ShrinkProgress::move
  int tried = 0;
  int accepted = 0;
  int skipped_seen = 0;
};

struct ShrinkOptions {
  Property property = Property::prefix;
  double time_budget_seconds = 60;
  // The most candidates judged (the engine run on them); 0: no limit. With a slow engine a
  // budget in candidates gives the same result on every machine, where seconds do not.
  int max_candidates = 0;
  std::function<void(const ShrinkProgress&)> on_progress;  // called after each acceptance
  // How the failing scenario and each candidate are judged; empty: judge_property on the
  // engine in this process. The commands judge in a forked child (kvfuzz/orchestrate.h), so
  // that a candidate that crashes or hangs the engine is judged as that crash (a failure
  // other than the one kept), not the end of the shrink.
  std::function<PropertyOutcome(Property, const Scenario&)> judge;
  // What the engine declares (candidates stay within it), when the caller asked already (in
  // a child, as the commands do); empty: asked of the engine here, once.
  std::optional<EngineDeclarations> declared;
};

// Under a candidate budget below this the search looks at every move once first
// (ShrinkResult::first_look); above it, or with a time budget only, the passes alone run
// (they reach the minima the suite's fixtures record).
constexpr int kFirstLookBelow = 200;

struct ShrinkResult {
  Scenario scenario;               // the smallest failing scenario found
  FailureSignature signature;      // the failure it keeps
  PropertyOutcome outcome;         // of `scenario`
  int accepted = 0;                // candidates that kept the failure
  int tried = 0;                   // candidates judged (run on the engine, or by the caller)
  int skipped_seen = 0;            // candidates not judged: equal to one rejected before
  bool timed_out = false;          // stopped by time_budget_seconds
  bool out_of_candidates = false;  // stopped by max_candidates
  // The canonical form (below) replaced the search's result, having failed the same way.
  bool canonicalised = false;
  // The search's result written as a fixture was longer than the input's: the input was
  // kept (a shrunk fixture is never larger than the raw one).
  bool kept_input = false;
  // max_candidates was below kFirstLookBelow: each move's first candidate was judged before
  // the passes (cheap moves first), so that every kind of cut is tried within the budget.
  bool first_look = false;
  // Every move in the order the search tries them, then the split lookahead ("split a
  // chunk": the splits it judged; the drops that follow a split count under their own
  // move), then "canonical form" (judged at most once). The columns add up to accepted, tried and
  // skipped_seen.
  std::vector<MoveCounts> moves;

  // The candidates that reached judgement: judged or skipped as seen.
  int candidates() const { return tried + skipped_seen; }
};

// After the search, whatever stopped it, two steps that compete for no budget: the
// canonical form (token-table entries the program never uses dropped, the rest numbered in
// order of first use, a generated table cut to the ids used: what the engine sees is the
// same, value for value) is judged once and kept when it fails the same way; then, if the
// result's fixture text is longer than the input's, the result with the input's generated
// table (a seed and a count, where the search wrote out explicit values) is judged once,
// and failing that the input is the result.
//
// What ended the shrink and what followed the search, as a phrase to append to a count of
// candidates: "", or e.g. ", stopped at the time budget, canonical form".
std::string stop_phrase(const ShrinkResult& result);

// `failing` must fail `options.property` on `engine`; returns nothing if it passes.
std::optional<ShrinkResult> shrink(const Scenario& failing, const EngineInfo& engine,
                                   const ShrinkOptions& options);

// The same search with the caller's judgement instead of a property: `still_fails` says
// whether a candidate keeps the failure (for a campaign: the engine, run in another
// process, still crashes or hangs on it). `options.property` is unused; the result's
// signature and outcome are left empty. Nothing if `failing` itself does not fail.
std::optional<ShrinkResult> shrink_with(const Scenario& failing,
                                        const std::function<bool(const Scenario&)>& still_fails,
                                        const ShrinkOptions& options);

}  // namespace kvfuzz
