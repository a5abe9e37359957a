// The comparator. Each engine row is paired with the program's slot for the same token
// (op, chunk, token); the row must carry the slot's key (sequence, epoch, absolute
// position) and values within the tolerance. Rows are judged by absolute position, never
// by their index in a chunk, and the first divergence is the earliest in program order.
#include "judge/compare.h"

#include <climits>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

#include "judge/tolerance.h"

namespace kvfuzz {

std::string to_string(const RowKey& key) {
  return "seq " + std::to_string(key.seq) + " epoch " + std::to_string(key.epoch) + " pos " +
         std::to_string(key.pos);
}

std::string to_string(const RowOrigin& origin) {
  return "op " + std::to_string(origin.op) + ", chunk " + std::to_string(origin.chunk) +
         ", token " + std::to_string(origin.token);
}

std::string_view failure_kind_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::engine_error:
      return "engine-error";
    case FailureKind::wrong_position:
      return "wrong-position";
    case FailureKind::not_finite:
      return "not-finite";
    case FailureKind::mismatch:
      return "mismatch";
    case FailureKind::race:
      return "race";
    case FailureKind::barrier_divergence:
      return "barrier-divergence";
  }
  return "?";
}

FailureKind failure_kind_of(EngineErrorKind kind) {
  switch (kind) {
    case EngineErrorKind::race:
      return FailureKind::race;
    case EngineErrorKind::barrier_divergence:
      return FailureKind::barrier_divergence;
    case EngineErrorKind::error:
      break;
  }
  return FailureKind::engine_error;
}

std::string_view model_site_name(ModelSite site) {
  switch (site) {
    case ModelSite::none:
      return "";
    case ModelSite::logits:
      return "logits";
    case ModelSite::position:
      return "position";
    case ModelSite::attention:
      return "attention";
    case ModelSite::hidden:
      return "hidden";
    case ModelSite::engine:
      return "engine";
  }
  return "?";
}

namespace {

using OriginKey = std::tuple<int, int, int>;
OriginKey origin_key(const RowOrigin& o) {
  return {o.op, o.chunk, o.token};
}

const ReferenceRow& reference_at(const ReferenceMap& reference, const RowKey& key) {
  const auto it = reference.find(key);
  if (it == reference.end()) {
    throw std::invalid_argument("compare: no reference row for " + to_string(key) +
                                " (slots and reference come from different scenarios)");
  }
  return it->second;
}

Divergence divergence_at(FailureKind kind, const ExpectedSlot& slot, const ReferenceRow& ref) {
  Divergence d;
  d.kind = kind;
  d.key = slot.key;
  d.origin = slot.origin;
  d.key_lo = ref.key_lo;
  d.key_hi = ref.key_hi;
  return d;
}

// Judges the values of a row at the right key: a non-finite value first (NaN never
// passes), then the first value further from the reference than its head's bound. In the
// same pass, `used` receives the largest share of its bound a value used (Verdict::
// bound_used): its error beyond the output rounding over its head's bound.
std::optional<Divergence> check_values(const EngineRow& row, const ExpectedSlot& slot,
                                       const ReferenceRow& ref, int q_heads, int value_dim,
                                       DType output, double& used) {
  const size_t size = static_cast<size_t>(q_heads) * static_cast<size_t>(value_dim);
  if (ref.values.size() != size || ref.bound.size() != static_cast<size_t>(q_heads)) {
    throw std::invalid_argument("compare: reference row " + to_string(ref.key) +
                                " does not have the layout's shape");
  }
  if (row.values.size() != size) {
    Divergence d = divergence_at(FailureKind::engine_error, slot, ref);
    d.detail = "the engine's row holds " + std::to_string(row.values.size()) +
               " values; expected " + std::to_string(q_heads) + " q heads x " +
               std::to_string(value_dim) + " value dims = " + std::to_string(size);
    return d;
  }
  const auto at = [&](FailureKind kind, size_t i) {
    Divergence d = divergence_at(kind, slot, ref);
    const auto h = static_cast<int>(i / static_cast<size_t>(value_dim));
    d.q_head = h;
    d.dim = static_cast<int>(i % static_cast<size_t>(value_dim));
    d.got = row.values[i];
    d.expected = ref.values[i];
    d.error = std::fabs(d.got - d.expected);
    d.bound = accepted_error(ref.bound[static_cast<size_t>(h)], d.expected, output);
    d.output = output;
    return d;
  };
  for (size_t i = 0; i < size; ++i) {
    if (!std::isfinite(row.values[i]) && row.values[i] != ref.values[i]) {
      return at(FailureKind::not_finite, i);
    }
  }
  for (size_t i = 0; i < size; ++i) {
    const double got = row.values[i], expected = ref.values[i];
    const double bound = ref.bound[i / static_cast<size_t>(value_dim)];
    // A non-finite reference value (only from infinite inputs) passes only when matched
    // exactly; written so that a NaN anywhere fails.
    if (!std::isfinite(expected)) {
      if (got != expected) return at(FailureKind::mismatch, i);
      continue;
    }
    const double error = std::fabs(got - expected);
    const double accepted = accepted_error(bound, expected, output);
    if (!(error <= accepted)) return at(FailureKind::mismatch, i);
    if (bound > 0) used = std::max(used, (error - (accepted - bound)) / bound);
  }
  return std::nullopt;
}

// A bound that reaches the largest visible |v| says nothing finer than "finite".
bool judged(const ReferenceRow& ref) {
  for (size_t h = 0; h < ref.bound.size() && h < ref.value_scale.size(); ++h) {
    if (ref.value_scale[h] > 0 && ref.bound[h] >= ref.value_scale[h]) return false;
  }
  return true;
}

}  // namespace

Verdict compare(const std::vector<ExpectedSlot>& slots, const ReferenceMap& reference,
                const EngineRun& run, int q_heads, int value_dim, DType output) {
  Verdict verdict;
  verdict.status.assign(slots.size(), RowStatus::not_run);
  std::map<OriginKey, const EngineRow*> by_origin;
  for (const EngineRow& row : run.rows) by_origin.emplace(origin_key(row.origin), &row);

  const OriginKey error_at = run.error ? origin_key(run.error_at.value_or(RowOrigin{}))
                                       : OriginKey{INT_MAX, INT_MAX, INT_MAX};
  std::optional<Divergence>& first = verdict.first;
  const auto fail = [&](size_t s, Divergence d) {
    verdict.status[s] = RowStatus::failed;
    ++verdict.rows_failed;
    if (!first) first = std::move(d);
  };

  for (size_t s = 0; s < slots.size(); ++s) {
    const ExpectedSlot& slot = slots[s];
    if (origin_key(slot.origin) >= error_at) break;  // never produced
    ++verdict.rows_compared;
    const ReferenceRow& ref = reference_at(reference, slot.key);
    const auto found = by_origin.find(origin_key(slot.origin));
    if (found == by_origin.end()) {
      Divergence d = divergence_at(FailureKind::engine_error, slot, ref);
      d.detail = "the engine returned no row for this token";
      fail(s, std::move(d));
      continue;
    }
    const EngineRow& row = *found->second;
    if (row.key != slot.key) {
      Divergence d = divergence_at(FailureKind::wrong_position, slot, ref);
      const bool same_epoch = row.key.seq == slot.key.seq && row.key.epoch == slot.key.epoch;
      d.detail = "the engine reported this token at " +
                 (same_epoch ? "position " + std::to_string(row.key.pos) : to_string(row.key)) +
                 ": a missing row here and an extra row there";
      fail(s, std::move(d));
      continue;
    }
    double used = 0;
    if (auto d = check_values(row, slot, ref, q_heads, value_dim, output, used)) {
      fail(s, std::move(*d));
      continue;
    }
    const bool row_judged = judged(ref);
    verdict.status[s] = row_judged ? RowStatus::ok : RowStatus::unjudged;
    verdict.rows_unjudged += row_judged ? 0 : 1;
    if (row_judged) verdict.bound_used = std::max(verdict.bound_used, used);
  }

  // Every compared slot lies before the error, so the error comes after their divergences.
  if (run.error && !first) {
    Divergence d;
    d.kind = failure_kind_of(run.error_kind);
    d.origin = run.error_at.value_or(RowOrigin{});
    d.key_lo = 0;
    d.key_hi = -1;  // no row: the error may have happened outside a token (a reset, say)
    for (const ExpectedSlot& slot : slots) {
      if (origin_key(slot.origin) != error_at) continue;
      const ReferenceRow& ref = reference_at(reference, slot.key);
      d.key = slot.key;
      d.key_lo = ref.key_lo;
      d.key_hi = ref.key_hi;
    }
    d.detail = *run.error;
    first = std::move(d);
  }
  verdict.pass = !first.has_value();
  return verdict;
}

}  // namespace kvfuzz
