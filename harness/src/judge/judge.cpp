// The straight line every entry point shares: prepare (engine-independent), then per
// engine: make, run, compare.
#include "kvfuzz/judge.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#include "judge/compare.h"
#include "judge/position_hypothesis.h"
#include "judge/reference_cache.h"
#include "judge/report.h"
#include "run/runner.h"

namespace kvfuzz {

Prepared prepare(const Scenario& scenario, const EngineNumerics& numerics) {
  Prepared prepared{
      TokenTable(scenario.tokens, scenario.layout), expected_slots(scenario), {}, numerics};
  // Each stream's rows once per process (reference_cache.h): the engines and properties
  // judged on this scenario share them.
  for (const LogicalStream& stream : logical_streams(scenario)) {
    const auto rows =
        cached_reference_rows(scenario.layout, scenario.tokens, prepared.table, stream, numerics);
    for (const ReferenceRow& row : *rows) {
      prepared.reference.emplace_hint(prepared.reference.end(), row.key, row);
    }
  }
  return prepared;
}

namespace {

// A first mismatch that a key rotated at a wrong position explains (position_hypothesis.h):
// the report names that key instead of guessing at rounding.
void explain_by_position(const Scenario& scenario, const Prepared& prepared,
                         CheckOutcome& outcome) {
  if (!outcome.verdict.first) return;
  Divergence& d = *outcome.verdict.first;
  if (d.kind != FailureKind::mismatch || d.site != ModelSite::none) return;
  const auto ref = prepared.reference.find(d.key);
  if (ref == prepared.reference.end()) return;
  const auto vd = static_cast<size_t>(scenario.layout.value_dim);
  for (const EngineRow& row : outcome.run.rows) {
    if (row.key != d.key || row.values.size() < (static_cast<size_t>(d.q_head) + 1) * vd) continue;
    const std::span<const float> head(row.values.data() + static_cast<size_t>(d.q_head) * vd, vd);
    if (auto why = wrong_angle_hypothesis(scenario, prepared.table, ref->second, d.q_head, head,
                                          prepared.numerics.output)) {
      d.hypothesis = *why;
    }
    return;
  }
}

}  // namespace

CheckOutcome judge_engine(const Scenario& scenario, const Prepared& prepared,
                          const EngineInfo& engine) {
  using Clock = std::chrono::steady_clock;
  CheckOutcome outcome;
  const auto start = Clock::now();
  std::optional<Prepared> reprepared;  // for an engine with other numerics than `prepared`
  try {
    std::unique_ptr<Engine> instance = engine.make ? engine.make(engine_config(scenario)) : nullptr;
    if (instance) {
      const EngineNumerics numerics = instance->numerics();
      if (numerics != prepared.numerics) reprepared = prepare(scenario, numerics);
      outcome.run = run_engine(scenario, prepared.table, *instance);
    } else {
      outcome.run.error = "engine '" + engine.name + "' could not be created";
      outcome.run.error_at = RowOrigin{};
    }
  } catch (const std::exception& e) {
    outcome.run.error = "engine '" + engine.name + "' refused the configuration: " + e.what();
    outcome.run.error_at = RowOrigin{};
  }
  const auto ran = Clock::now();
  const Prepared& judged = reprepared ? *reprepared : prepared;
  outcome.verdict = compare(judged.slots, judged.reference, outcome.run, scenario.layout.q_heads,
                            scenario.layout.value_dim, judged.numerics.output);
  explain_by_position(scenario, judged, outcome);
  const auto compared = Clock::now();
  outcome.engine_seconds = std::chrono::duration<double>(ran - start).count();
  outcome.compare_seconds = std::chrono::duration<double>(compared - ran).count();
  return outcome;
}

std::optional<std::string> judge_expect(const Scenario& scenario, const Prepared& prepared) {
  const int q_heads = scenario.layout.q_heads, value_dim = scenario.layout.value_dim;
  for (size_t i = 0; i < scenario.expect.size(); ++i) {
    const ExpectedRow& hand = scenario.expect[i];
    const RowKey key{hand.seq, hand.epoch, hand.pos};
    const std::string where = "expect[" + std::to_string(i) + "] (" + to_string(key) + ")";
    const auto it = prepared.reference.find(key);
    if (it == prepared.reference.end()) {
      return where + ": the program produces no row at this key";
    }
    if (hand.values.size() != static_cast<size_t>(q_heads)) {
      return where + ": " + std::to_string(hand.values.size()) + " q heads given, the layout has " +
             std::to_string(q_heads);
    }
    for (int h = 0; h < q_heads; ++h) {
      const auto& head = hand.values[static_cast<size_t>(h)];
      if (head.size() != static_cast<size_t>(value_dim)) {
        return where + ", q head " + std::to_string(h) + ": " + std::to_string(head.size()) +
               " values given, the layout's value_dim is " + std::to_string(value_dim);
      }
      for (int d = 0; d < value_dim; ++d) {
        const double given = head[static_cast<size_t>(d)];
        const double reference = it->second.values[static_cast<size_t>(h * value_dim + d)];
        // 1e-9 relative, absolute below magnitude 1.
        const bool ok = std::fabs(given - reference) <= 1e-9 * std::max(1.0, std::fabs(reference));
        if (!ok) {
          return where + ", q head " + std::to_string(h) + ", dim " + std::to_string(d) +
                 ": hand value " + format_exact(given) + ", reference " + format_exact(reference);
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace kvfuzz
