// The scenario shrinker: a greedy search for a local minimum.
//
// Passes run every move of shrink_candidates.h in order (drops first, then layout,
// placement and token data) over the current scenario; a candidate replaces it when it is
// strictly smaller in the lexicographic measure, passes validate(), and fails the property
// with the same signature. After an acceptance the move is asked again for the same index,
// so a value keeps halving and a run of drops keeps going. When a whole pass accepts
// nothing, a split lookahead tries splitting each chunk in two and then dropping ops,
// chunks or tokens from the split scenario; a split is kept only when the drop that
// follows makes the scenario smaller. Nothing left: a local minimum. Everything is a pure
// function of the input except where the time budget stops it.
#include "kvfuzz/shrink.h"

#include <chrono>
#include <exception>
#include <utility>

#include "shrink/shrink_candidates.h"

namespace kvfuzz {

namespace {

using Clock = std::chrono::steady_clock;

class Search {
 public:
  // `judge` replaces the property check when set (shrink_with).
  Search(const EngineInfo* engine, const std::function<bool(const Scenario&)>* judge,
         const ShrinkOptions& options, ShrinkResult& result)
      : engine_(engine),
        judge_(judge),
        options_(options),
        result_(result),
        start_(Clock::now()),
        current_measure_(shrinking::measure(result.scenario)) {}

  void run() {
    if (out_of_time()) return;
    bool progress = true;
    while (progress && !result_.timed_out) {
      progress = false;
      for (const shrinking::Move& move : shrinking::moves()) {
        progress = run_move(move, result_.scenario) || progress;
        if (result_.timed_out) return;
      }
      if (!progress) progress = split_lookahead();
    }
  }

 private:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  bool out_of_time() {
    if (seconds() >= options_.time_budget_seconds) result_.timed_out = true;
    return result_.timed_out;
  }

  // Runs `scenario` and says whether it fails with the signature being kept.
  bool fails_the_same(const Scenario& scenario, PropertyOutcome& outcome) {
    ++result_.tried;
    if (judge_ != nullptr) return (*judge_)(scenario);
    try {
      outcome = judge_property(options_.property, scenario, *engine_);
    } catch (const std::exception&) {
      return false;  // a candidate nobody can judge is not the same failure
    }
    return !outcome.pass && outcome.signature && *outcome.signature == result_.signature;
  }

  // Accepts `candidate` if it is smaller, valid and fails the same way.
  bool try_candidate(Scenario&& candidate) {
    shrinking::Measure size = shrinking::measure(candidate);
    if (!(size < current_measure_) || validate(candidate) || out_of_time()) return false;
    PropertyOutcome outcome;
    if (!fails_the_same(candidate, outcome)) return false;
    result_.scenario = std::move(candidate);
    result_.outcome = std::move(outcome);
    current_measure_ = std::move(size);
    ++result_.accepted;
    if (options_.on_progress) {
      ShrinkProgress progress;
      progress.accepted = result_.accepted;
      progress.tried = result_.tried;
      progress.seconds = seconds();
      progress.best = &result_.scenario;
      options_.on_progress(progress);
    }
    return true;
  }

  // Every candidate of `move` on `base` (the current scenario, or a split of it).
  bool run_move(const shrinking::Move& move, const Scenario& base) {
    bool accepted = false;
    const bool on_current = &base == &result_.scenario;
    for (int index = 0;; ++index) {
      Scenario candidate;
      const shrinking::Made made =
          move.make(on_current ? result_.scenario : base, index, candidate);
      if (made == shrinking::Made::end) break;
      if (made == shrinking::Made::skip) continue;
      if (try_candidate(std::move(candidate))) {
        accepted = true;
        if (!on_current) return true;  // the base was a lookahead: start again from the result
        --index;                       // the same index again, on the new current scenario
      }
      if (result_.timed_out) break;
    }
    return accepted;
  }

  bool split_lookahead() {
    for (int index = 0;; ++index) {
      Scenario split;
      const shrinking::Made made = shrinking::split_chunk(result_.scenario, index, split);
      if (made == shrinking::Made::end) return false;
      if (out_of_time()) return false;
      if (made == shrinking::Made::skip || validate(split)) continue;
      PropertyOutcome outcome;
      if (!fails_the_same(split, outcome)) continue;
      for (const shrinking::Move& move : shrinking::drop_moves()) {
        if (run_move(move, split)) return true;
        if (result_.timed_out) return false;
      }
    }
  }

  const EngineInfo* engine_;
  const std::function<bool(const Scenario&)>* judge_;
  const ShrinkOptions& options_;
  ShrinkResult& result_;
  Clock::time_point start_;
  shrinking::Measure current_measure_;
};

}  // namespace

std::optional<ShrinkResult> shrink(const Scenario& failing, const EngineInfo& engine,
                                   const ShrinkOptions& options) {
  PropertyOutcome outcome = judge_property(options.property, failing, engine);
  if (outcome.pass || !outcome.signature) return std::nullopt;
  ShrinkResult result;
  result.scenario = failing;
  result.signature = *outcome.signature;
  result.outcome = std::move(outcome);
  Search(&engine, nullptr, options, result).run();
  return result;
}

std::optional<ShrinkResult> shrink_with(const Scenario& failing,
                                        const std::function<bool(const Scenario&)>& still_fails,
                                        const ShrinkOptions& options) {
  if (!still_fails(failing)) return std::nullopt;
  ShrinkResult result;
  result.scenario = failing;
  Search(nullptr, &still_fails, options, result).run();
  return result;
}

}  // namespace kvfuzz
