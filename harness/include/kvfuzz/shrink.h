// The scenario shrinker: reduces a failing scenario to a local minimum that fails with the
// same signature (same property, same kind of divergence), so shrinking never wanders onto
// another bug. It works on scenarios, not bytes: drop ops, sequences and tokens; merge and
// split chunks; drop resets that do not matter; reduce heads to the smallest layout that
// still fails; head_dim to 1; page size; values toward 0 and small integers.
#pragma once

#include <functional>
#include <optional>

#include "kvfuzz/engine.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct ShrinkProgress {
  int accepted = 0;  // candidates that kept the failure
  int tried = 0;     // candidates run
  double seconds = 0;
  const Scenario* best = nullptr;
};

struct ShrinkOptions {
  Property property = Property::prefix;
  double time_budget_seconds = 60;
  std::function<void(const ShrinkProgress&)> on_progress;  // called after each acceptance
};

struct ShrinkResult {
  Scenario scenario;           // the smallest failing scenario found
  FailureSignature signature;  // the failure it keeps
  PropertyOutcome outcome;     // of `scenario`
  int accepted = 0;
  int tried = 0;
  bool timed_out = false;
};

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
