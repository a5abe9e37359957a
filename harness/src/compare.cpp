// The comparator. Rows are paired by key (sequence, epoch, absolute position), never by
// their index in a chunk; the first divergence is the earliest in program order.
#include "kvfuzz/compare.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace kvfuzz {

std::string to_string(const RowKey& key) {
  return "seq " + std::to_string(key.seq) + " epoch " + std::to_string(key.epoch) + " pos " +
         std::to_string(key.pos);
}

std::string_view failure_kind_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::engine_error:
      return "engine-error";
    case FailureKind::missing_row:
      return "missing-row";
    case FailureKind::extra_row:
      return "extra-row";
    case FailureKind::not_finite:
      return "not-finite";
    case FailureKind::mismatch:
      return "mismatch";
  }
  return "?";
}

namespace {

bool origin_less(const RowOrigin& a, const RowOrigin& b) {
  return std::tie(a.op, a.chunk, a.token) < std::tie(b.op, b.chunk, b.token);
}

bool same_origin(const RowOrigin& a, const RowOrigin& b) {
  return a.op == b.op && a.chunk == b.chunk && a.token == b.token;
}

// The slot the program assigns to `origin`, if any (slots are in program order, which is
// origin order).
const ExpectedSlot* slot_at(const std::vector<ExpectedSlot>& slots, const RowOrigin& origin) {
  const auto it = std::lower_bound(
      slots.begin(), slots.end(), origin,
      [](const ExpectedSlot& slot, const RowOrigin& o) { return origin_less(slot.origin, o); });
  return it != slots.end() && same_origin(it->origin, origin) ? &*it : nullptr;
}

const ReferenceRow& reference_at(const ReferenceMap& reference, const RowKey& key) {
  const auto it = reference.find(key);
  if (it == reference.end()) {
    throw std::invalid_argument("compare: no reference row for " + to_string(key) +
                                " (slots and reference come from different scenarios)");
  }
  return it->second;
}

// The first failing value of a row that exists: any non-finite value first, then the first
// value further from the reference than the row's bound. NaN never passes.
std::optional<Divergence> check_values(const EngineRow& row, const ReferenceRow& ref, int q_heads,
                                       int value_dim) {
  const size_t size = static_cast<size_t>(q_heads) * static_cast<size_t>(value_dim);
  Divergence d;
  d.key = ref.key;
  d.origin = row.origin;
  d.key_lo = ref.key_lo;
  d.key_hi = ref.key_hi;
  if (ref.values.size() != size || ref.bound.size() != static_cast<size_t>(q_heads)) {
    throw std::invalid_argument("compare: reference row " + to_string(ref.key) +
                                " does not have the layout's shape");
  }
  if (row.values.size() != size) {
    d.kind = FailureKind::engine_error;
    d.detail = "the engine's row holds " + std::to_string(row.values.size()) +
               " values; expected " + std::to_string(q_heads) + " q heads x " +
               std::to_string(value_dim) + " value dims = " + std::to_string(size);
    return d;
  }
  const auto fill = [&](FailureKind kind, size_t i) {
    const auto h = static_cast<int>(i / static_cast<size_t>(value_dim));
    d.kind = kind;
    d.q_head = h;
    d.dim = static_cast<int>(i % static_cast<size_t>(value_dim));
    d.got = row.values[i];
    d.expected = ref.values[i];
    d.error = std::fabs(d.got - d.expected);
    d.bound = ref.bound[static_cast<size_t>(h)];
    return d;
  };
  for (size_t i = 0; i < size; ++i) {
    const double got = row.values[i];
    if (std::isnan(got) || (std::isinf(got) && got != ref.values[i])) {
      return fill(FailureKind::not_finite, i);
    }
  }
  for (size_t i = 0; i < size; ++i) {
    const double got = row.values[i], expected = ref.values[i];
    const double bound = ref.bound[i / static_cast<size_t>(value_dim)];
    // A non-finite reference value (only from infinite inputs) passes only when matched
    // exactly; written so that a NaN anywhere fails.
    const bool ok = std::isfinite(expected) ? std::fabs(got - expected) <= bound : got == expected;
    if (!ok) return fill(FailureKind::mismatch, i);
  }
  return std::nullopt;
}

}  // namespace

Verdict compare(const std::vector<ExpectedSlot>& slots, const ReferenceMap& reference,
                const EngineRun& run, int q_heads, int value_dim) {
  Verdict verdict;

  // Engine rows by key; among rows with the same key the first returned is the one paired
  // with the slot, the others are extra rows.
  std::vector<std::pair<RowKey, size_t>> index;
  index.reserve(run.rows.size());
  for (size_t i = 0; i < run.rows.size(); ++i) index.emplace_back(run.rows[i].key, i);
  std::sort(index.begin(), index.end());
  const auto lookup = [&](const RowKey& key) -> std::optional<size_t> {
    const auto it = std::lower_bound(
        index.begin(), index.end(), key,
        [](const std::pair<RowKey, size_t>& entry, const RowKey& k) { return entry.first < k; });
    if (it == index.end() || it->first != key) return std::nullopt;
    return it->second;
  };
  std::vector<char> paired(run.rows.size(), 0);

  // With an engine error, rows from the failing op on were never produced: only the slots
  // before it are compared.
  const RowOrigin error_at = run.error ? run.error_at.value_or(RowOrigin{INT_MAX, INT_MAX, INT_MAX})
                                       : RowOrigin{INT_MAX, INT_MAX, INT_MAX};
  std::optional<Divergence>& first = verdict.first;

  for (const ExpectedSlot& slot : slots) {
    if (run.error && !origin_less(slot.origin, error_at)) continue;
    ++verdict.rows_compared;
    const ReferenceRow& ref = reference_at(reference, slot.key);
    const std::optional<size_t> found = lookup(slot.key);
    if (!found) {
      ++verdict.rows_failed;
      if (first) continue;
      Divergence d;
      d.kind = FailureKind::missing_row;
      d.key = slot.key;
      d.origin = slot.origin;
      d.key_lo = ref.key_lo;
      d.key_hi = ref.key_hi;
      if (!ref.values.empty()) d.expected = ref.values[0];
      if (!ref.bound.empty()) d.bound = ref.bound[0];
      const auto same = std::find_if(run.rows.begin(), run.rows.end(), [&](const EngineRow& r) {
        return same_origin(r.origin, slot.origin);
      });
      if (same == run.rows.end()) {
        d.detail = "the engine returned no row for this token";
      } else if (same->key.seq == slot.key.seq && same->key.epoch == slot.key.epoch) {
        d.detail =
            "the engine reported position " + std::to_string(same->key.pos) + " for this token";
      } else {
        d.detail = "the engine reported this token as " + to_string(same->key);
      }
      first = std::move(d);
      continue;
    }
    paired[*found] = 1;
    const EngineRow& row = run.rows[*found];
    if (auto d = check_values(row, ref, q_heads, value_dim)) {
      ++verdict.rows_failed;
      d->origin = slot.origin;
      if (!first) first = std::move(d);
    }
  }

  // Every compared slot lies before the error, so the error comes after any of their
  // divergences in program order.
  if (run.error && !first) {
    Divergence d;
    d.kind = FailureKind::engine_error;
    d.origin = error_at;
    d.key_lo = 0;
    d.key_hi = -1;  // no row: the error happened outside a token (a reset, say)
    if (const ExpectedSlot* slot = slot_at(slots, error_at)) {
      d.key = slot->key;
      const auto it = reference.find(slot->key);
      if (it != reference.end()) {
        d.key_lo = it->second.key_lo;
        d.key_hi = it->second.key_hi;
      }
    }
    d.detail = *run.error;
    first = std::move(d);
  }

  // Rows no slot took: keys the program does not imply, and second rows at one key.
  for (size_t i = 0; i < run.rows.size(); ++i) {
    if (paired[i]) continue;
    ++verdict.rows_failed;
    if (first) continue;
    const EngineRow& row = run.rows[i];
    Divergence d;
    d.kind = FailureKind::extra_row;
    d.key = row.key;
    d.origin = row.origin;
    if (!row.values.empty()) d.got = row.values[0];
    d.key_lo = 0;
    d.key_hi = -1;
    const ExpectedSlot* own = slot_at(slots, row.origin);
    const std::optional<size_t> holder = lookup(row.key);
    if (holder && *holder != i) {
      const RowOrigin& o = run.rows[*holder].origin;
      d.detail = "the engine already returned a row at this key (op " + std::to_string(o.op) +
                 ", chunk " + std::to_string(o.chunk) + ", token " + std::to_string(o.token) + ")";
    } else if (own) {
      d.detail = "the program implies no row at this key; this token is at " + to_string(own->key);
    } else {
      d.detail = "the program implies no row at this key, and no row for this token";
    }
    const auto ref = reference.find(own ? own->key : row.key);
    if (ref != reference.end()) {
      d.key_lo = ref->second.key_lo;
      d.key_hi = ref->second.key_hi;
      if (!ref->second.values.empty()) d.expected = ref->second.values[0];
      if (!ref->second.bound.empty()) d.bound = ref->second.bound[0];
    }
    first = std::move(d);
  }

  verdict.pass = !first.has_value();
  return verdict;
}

}  // namespace kvfuzz
