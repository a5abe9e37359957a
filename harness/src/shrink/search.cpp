// The scenario shrinker: a greedy search for a local minimum.
//
// Under a small candidate budget a first look judges each move's first candidate once (cheap
// moves first: the largest cut of every kind before a slow engine's budget goes on fine
// drops). Then passes run every
// move of shrink/moves.h in order (drops first, then layout, placement and token data) over
// the current scenario; a candidate replaces it when it is strictly
// smaller in the measure (shrink/measure.h), passes validate(), and fails the property with
// the same signature. After an acceptance the move is asked again for the same index, so a
// value keeps halving and a run of drops keeps going. When a whole pass accepts nothing, a
// split lookahead tries splitting each chunk in two and then dropping ops, chunks or
// tokens from the split scenario; a split is kept only when the drop that follows makes
// the scenario smaller. Nothing left: a local minimum. Everything is a pure function of the
// input except where the time budget stops it.
//
// Later passes make many of the candidates earlier passes made (every move is asked again
// from index 0), so rejected candidates are remembered by their canonical fixture text and
// not judged again. Only rejections are remembered: an accepted candidate becomes the
// current scenario, and nothing equal to it can be smaller than it later.
#include "shrink/search.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/shrink.h"
#include "shrink/canonical.h"
#include "shrink/measure.h"
#include "shrink/moves.h"
#include "support/hash.h"

namespace kvfuzz {

namespace {

using Clock = std::chrono::steady_clock;

// The count row of the canonical form, judged once after the moves (shrink/canonical.h).
constexpr std::string_view kCanonicalRow = "canonical form";

// One row of the result's per-move counts for every move, in the order the search tries
// them, then the split lookahead.
std::vector<MoveCounts> count_rows(const std::vector<shrinking::Move>& moves) {
  std::vector<MoveCounts> rows;
  for (const shrinking::Move& move : moves) rows.push_back({std::string(move.name)});
  rows.push_back({std::string(shrinking::split_move().name)});
  rows.push_back({std::string(kCanonicalRow)});
  return rows;
}

class Search {
 public:
  // `judge` replaces the property check when set (shrink_with).
  Search(const EngineInfo* engine, const std::function<bool(const Scenario&)>* judge,
         const ShrinkOptions& options, ShrinkResult& result,
         const std::vector<shrinking::Move>& moves = shrinking::moves())
      : moves_(moves),
        engine_(engine),
        judge_(judge),
        options_(options),
        result_(result),
        start_(Clock::now()),
        current_measure_(shrinking::measure(result.scenario)),
        input_outcome_(result.outcome) {
    result_.moves = count_rows(moves_);
    // What the engine declares, asked once: a candidate outside it (say value_dim 1 for an
    // engine with one head size) says nothing about the engine, and replay would skip the
    // shrunk fixture. An engine that cannot even be probed is shrunk without the filter.
    if (options_.declared) {
      declared_ = options_.declared;
    } else if (engine_) {
      try {
        declared_ = probe_declarations(*engine_);
      } catch (const std::exception&) {
        declared_.reset();
      }
    }
  }

  // The moves until a local minimum or a budget, then the canonical form and the size
  // guard (kvfuzz/shrink.h), which no budget stops.
  void run(const Scenario& input) {
    search();
    canonicalise();
    const size_t input_size = write_fixture(input).size();
    if (write_fixture(result_.scenario).size() <= input_size) return;
    // Longer than the input: the explicit values a move wrote out from a generated table,
    // most often. The input's generated table instead, if that fails the same way.
    if (std::optional<Scenario> generated =
            shrinking::with_generated_table(result_.scenario, input);
        generated && !validate(*generated) && !outside_the_engine(*generated) &&
        write_fixture(*generated).size() <= input_size) {
      PropertyOutcome outcome;
      if (fails_the_same(*generated, outcome, result_.moves.back())) {
        result_.scenario = std::move(*generated);
        result_.outcome = std::move(outcome);
        result_.canonicalised = true;
        ++result_.accepted;
        ++result_.moves.back().accepted;
        return;
      }
    }
    result_.scenario = input;
    result_.outcome = input_outcome_;
    result_.kept_input = true;
  }

  void search() {
    if (out_of_budget()) return;
    if (few_affordable()) first_look();
    bool progress = true;
    while (progress && !stopped()) {
      progress = false;
      for (const shrinking::Move& move : moves_) {
        progress = run_move(move, result_.scenario) || progress;
        if (stopped()) return;
      }
      if (!progress) progress = split_lookahead();
    }
  }

 private:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  bool stopped() const { return result_.timed_out || result_.out_of_candidates; }

  // Whether a budget (seconds, candidates judged) is spent; says which in the result.
  bool out_of_budget() {
    if (seconds() >= options_.time_budget_seconds) result_.timed_out = true;
    if (options_.max_candidates > 0 && result_.tried >= options_.max_candidates) {
      result_.out_of_candidates = true;
    }
    return stopped();
  }

  // Cheap moves first: each move's first candidate that reaches judgement, once, before the
  // passes. So the largest cut of every kind (half the ops, the fewest heads, the smallest
  // head_dim, one value wholesale) is judged before the fine drops of the first pass spend
  // a slow engine's budget on single tokens: a budget of tens of candidates leaves a small
  // layout as well as a short program.
  // A candidate budget, not the time budget at the engine's speed, decides: the same path
  // on every machine (a known bug's fixture is matched by the minimum the path reaches).
  bool few_affordable() const {
    return options_.max_candidates > 0 && options_.max_candidates < kFirstLookBelow;
  }

  void first_look() {
    result_.first_look = true;
    for (const shrinking::Move& move : moves_) {
      MoveCounts& counts = counts_of(move);
      const int tried = result_.tried;
      for (int index = 0; result_.tried == tried && !stopped(); ++index) {
        Scenario candidate;
        const shrinking::Made made = move.make(result_.scenario, index, candidate);
        if (made == shrinking::Made::end) break;
        if (made == shrinking::Made::skip) continue;
        if (try_candidate(std::move(candidate), move, counts)) break;
      }
      if (stopped()) return;
    }
  }

  // The canonical form of the result, judged once (a nondeterministic engine could fail it
  // another way: then the result stays as the search left it).
  void canonicalise() {
    std::optional<Scenario> canonical = shrinking::canonical_form(result_.scenario);
    if (!canonical || validate(*canonical) || outside_the_engine(*canonical)) return;
    MoveCounts& counts = result_.moves.back();  // kCanonicalRow
    PropertyOutcome outcome;
    if (!fails_the_same(*canonical, outcome, counts)) return;
    result_.scenario = std::move(*canonical);
    result_.outcome = std::move(outcome);
    result_.canonicalised = true;
    ++result_.accepted;
    ++counts.accepted;
  }

  // The row of `move` (a drop move of the lookahead shares its row in moves()).
  MoveCounts& counts_of(const shrinking::Move& move) {
    for (MoveCounts& row : result_.moves) {
      if (row.move == move.name) return row;
    }
    throw std::logic_error("shrink: no count row for the move " + std::string(move.name));
  }

  // Judges `scenario`: whether it fails with the signature being kept.
  bool judge(const Scenario& scenario, PropertyOutcome& outcome) {
    if (judge_ != nullptr) return (*judge_)(scenario);
    try {
      outcome = options_.judge ? options_.judge(options_.property, scenario)
                               : judge_property(options_.property, scenario, *engine_);
    } catch (const std::exception&) {
      return false;  // a candidate nobody can judge is not the same failure
    }
    return !outcome.pass && outcome.signature && *outcome.signature == result_.signature;
  }

  // Says whether `scenario` fails the same way: judged, unless it was rejected before.
  bool fails_the_same(const Scenario& scenario, PropertyOutcome& outcome, MoveCounts& counts) {
    // The name, note and provenance are the input's in every candidate: the texts differ
    // exactly where the scenarios do. A 64-bit hash keeps the set small (a candidate's
    // text can be megabytes of values); a new candidate that shares the hash of one of n
    // rejected ones (a chance of about n / 2^64) would be skipped unjudged.
    const uint64_t key = fnv1a(write_fixture(scenario));
    if (rejected_.contains(key)) {
      ++result_.skipped_seen;
      ++counts.skipped_seen;
      return false;
    }
    ++result_.tried;
    ++counts.tried;
    const bool same = judge(scenario, outcome);
    if (!same) rejected_.insert(key);
    return same;
  }

  // Accepts `candidate` if it is smaller, valid and fails the same way.
  bool try_candidate(Scenario&& candidate, const shrinking::Move& move, MoveCounts& counts) {
    shrinking::Measure size = shrinking::measure(candidate);
    if (!(size < current_measure_) || validate(candidate) || outside_the_engine(candidate) ||
        out_of_budget())
      return false;
    PropertyOutcome outcome;
    if (!fails_the_same(candidate, outcome, counts)) return false;
    result_.scenario = std::move(candidate);
    result_.outcome = std::move(outcome);
    current_measure_ = size;
    ++result_.accepted;
    ++counts.accepted;
    if (options_.on_progress) {
      ShrinkProgress progress;
      progress.accepted = result_.accepted;
      progress.tried = result_.tried;
      progress.skipped_seen = result_.skipped_seen;
      progress.seconds = seconds();
      progress.best = &result_.scenario;
      progress.move = move.name;
      options_.on_progress(progress);
    }
    return true;
  }

  // Every candidate of `move` on `base` (the current scenario, or a split of it).
  bool run_move(const shrinking::Move& move, const Scenario& base) {
    MoveCounts& counts = counts_of(move);
    bool accepted = false;
    const bool on_current = &base == &result_.scenario;
    for (int index = 0;; ++index) {
      Scenario candidate;
      const shrinking::Made made =
          move.make(on_current ? result_.scenario : base, index, candidate);
      if (made == shrinking::Made::end) break;
      if (made == shrinking::Made::skip) continue;
      if (try_candidate(std::move(candidate), move, counts)) {
        accepted = true;
        if (!on_current) return true;  // the base was a lookahead: start again from the result
        --index;                       // the same index again, on the new current scenario
      }
      if (stopped()) break;
    }
    return accepted;
  }

  bool split_lookahead() {
    const shrinking::Move& split_move = shrinking::split_move();
    MoveCounts& counts = counts_of(split_move);
    for (int index = 0;; ++index) {
      Scenario split;
      const shrinking::Made made = split_move.make(result_.scenario, index, split);
      if (made == shrinking::Made::end) return false;
      if (out_of_budget()) return false;
      if (made == shrinking::Made::skip || validate(split) || outside_the_engine(split)) continue;
      PropertyOutcome outcome;
      if (!fails_the_same(split, outcome, counts)) continue;
      for (const shrinking::Move& move : shrinking::drop_moves()) {
        if (run_move(move, split)) return true;
        if (stopped()) return false;
      }
    }
  }

  bool outside_the_engine(const Scenario& scenario) const {
    return declared_ && unjudgeable(scenario, *declared_).has_value();
  }

  const std::vector<shrinking::Move>& moves_;
  const EngineInfo* engine_;
  std::optional<EngineDeclarations> declared_;
  const std::function<bool(const Scenario&)>* judge_;
  const ShrinkOptions& options_;
  ShrinkResult& result_;
  Clock::time_point start_;
  shrinking::Measure current_measure_;
  PropertyOutcome input_outcome_;          // the input's, for the size guard
  std::unordered_set<uint64_t> rejected_;  // hashes of the candidates judged and rejected
};

}  // namespace

namespace shrinking {

std::optional<ShrinkResult> shrink_with_moves(const Scenario& failing, const EngineInfo& engine,
                                              const ShrinkOptions& options,
                                              const std::vector<Move>& moves) {
  PropertyOutcome outcome = options.judge ? options.judge(options.property, failing)
                                          : judge_property(options.property, failing, engine);
  if (outcome.pass || !outcome.signature) return std::nullopt;
  ShrinkResult result;
  result.scenario = failing;
  result.signature = *outcome.signature;
  result.outcome = std::move(outcome);
  Search(&engine, nullptr, options, result, moves).run(failing);
  return result;
}

}  // namespace shrinking

std::string stop_phrase(const ShrinkResult& result) {
  std::string phrase;
  if (result.first_look) phrase += ", cheap moves first";
  if (result.timed_out) phrase += ", stopped at the time budget";
  if (result.out_of_candidates) phrase += ", stopped at the candidate budget";
  if (result.canonicalised) phrase += ", canonical form";
  if (result.kept_input) phrase += ", the input kept (the result's fixture was longer)";
  return phrase;
}

std::optional<ShrinkResult> shrink(const Scenario& failing, const EngineInfo& engine,
                                   const ShrinkOptions& options) {
  return shrinking::shrink_with_moves(failing, engine, options, shrinking::moves());
}

std::optional<ShrinkResult> shrink_with(const Scenario& failing,
                                        const std::function<bool(const Scenario&)>& still_fails,
                                        const ShrinkOptions& options) {
  if (!still_fails(failing)) return std::nullopt;
  ShrinkResult result;
  result.scenario = failing;
  Search(nullptr, &still_fails, options, result).run(failing);
  return result;
}

}  // namespace kvfuzz
