// The six properties (property.h). prefix is the straight line of check.h. The other five
// are invariances: run the engine on the scenario (the base) and on variants that differ
// from it in the property's dimension only (property_variants.h), and pair the two runs'
// rows by key. They judge the engine against itself, not against the reference, so a base
// run that already fails prefix equivalence fails an invariance only where the variant
// changes its rows: each property reports its own dimension's failures.
//
// Tolerance: an honest engine's row lies within the reference's bound of the reference
// row in either run, so two honest runs lie within twice that bound of each other (the
// triangle inequality); that is the tolerance here. Two non-finite values count as equal
// when they are the same (both NaN, or the same infinity): a failure shared by both runs
// belongs to the prefix property.
//
// Bitwise claims: an engine may announce that it keeps an invariance bit for bit
// (Engine::bitwise_claims). Its variants' rows must then have exactly the same bits as
// the base run's (+0 and -0 differ; NaNs must match in bits too), and the first value that
// differs is reported with both bit patterns and their distance in ulps of the engine's
// declared output dtype.
//
// Reports: the variant is what an invariance judges, so a divergence's "got" is the
// variant run's value and "expected" the base run's, at the base run's row key.
#include "kvfuzz/property.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "judge/attention_property.h"
#include "judge/property_variants.h"
#include "judge/report.h"
#include "judge/tolerance.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/token_table.h"
#include "run/runner.h"

namespace kvfuzz {

namespace {

// Each row sits at its property's index, so that a property finds its row directly.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kProperties.size(); ++i) {
    if (static_cast<size_t>(kProperties[i].property) != i) return false;
  }
  return true;
}
static_assert(rows_in_enum_order());

}  // namespace

const PropertyInfo& property_info(Property property) {
  return kProperties.at(static_cast<size_t>(property));
}

std::string_view property_name(Property property) {
  return property_info(property).name;
}

std::optional<Property> parse_property(std::string_view name) {
  for (const PropertyInfo& row : kProperties) {
    if (row.name == name) return row.property;
  }
  return std::nullopt;
}

std::string to_string(const FailureSignature& signature) {
  return std::string(property_name(signature.property)) + "/" +
         std::string(failure_kind_name(signature.kind));
}

namespace {

// One run of `engine` on `scenario`; `claims`, when given, receives the invariances the
// engine claims bit for bit.
EngineRun run_once(const Scenario& scenario, const TokenTable& table, const EngineInfo& engine,
                   BitwiseClaims* claims = nullptr, EngineNumerics* numerics = nullptr) {
  EngineRun run;
  try {
    std::unique_ptr<Engine> instance = engine.make ? engine.make(engine_config(scenario)) : nullptr;
    if (instance && claims != nullptr) *claims = instance->bitwise_claims();
    if (instance && numerics != nullptr) *numerics = instance->numerics();
    if (instance) return run_engine(scenario, table, *instance);
    run.error = "engine '" + engine.name + "' could not be created";
  } catch (const std::exception& e) {
    run.error = "engine '" + engine.name + "' refused the configuration: " + e.what();
  }
  run.error_at = RowOrigin{};
  return run;
}

// One run's rows, one per slot (nullptr where the run produced none).
std::vector<const EngineRow*> rows_by_slot(const std::vector<ExpectedSlot>& slots,
                                           const EngineRun& run) {
  std::map<std::tuple<int, int, int>, size_t> index;
  for (size_t s = 0; s < slots.size(); ++s) {
    const RowOrigin& o = slots[s].origin;
    index.emplace(std::tuple{o.op, o.chunk, o.token}, s);
  }
  std::vector<const EngineRow*> rows(slots.size(), nullptr);
  for (const EngineRow& row : run.rows) {
    const auto it = index.find({row.origin.op, row.origin.chunk, row.origin.token});
    if (it != index.end() && rows[it->second] == nullptr) rows[it->second] = &row;
  }
  return rows;
}

// Whether `engine` claims `property` bit for bit.
bool claims_bitwise(Property property, const BitwiseClaims& claims) {
  switch (property) {
    case Property::batch:
      return claims.batch;
    case Property::schedule:
      return claims.schedule;
    case Property::layout:
      return claims.layout;
    case Property::poison:
      return claims.poison;
    case Property::prefix:
    case Property::reset:
      return false;
  }
  return false;
}

// A value's bits in `dtype` and its place on a monotone integer line of that dtype's values
// (adjacent values 1 apart; negative values from -1 down, so that -0 and +0, whose bits
// differ, are 1 apart); nullopt when the dtype does not hold the value exactly.
struct DTypeBits {
  uint32_t bits = 0;
  int64_t line = 0;
};
std::optional<DTypeBits> dtype_bits(float x, DType dtype) {
  if (!std::isfinite(x) || round_to_dtype(x, dtype) != x) return std::nullopt;
  const uint32_t bits = dtype == DType::f32   ? std::bit_cast<uint32_t>(x)
                        : dtype == DType::f16 ? f32_to_f16(x)
                                              : f32_to_bf16(x);
  const uint32_t sign = dtype == DType::f32 ? 0x80000000u : 0x8000u;
  return DTypeBits{bits, bits & sign ? -1 - static_cast<int64_t>(bits & (sign - 1))
                                     : static_cast<int64_t>(bits)};
}

// A bitwise claim's two values, in the engine's declared output dtype: each one's bits and
// value, and how many of that dtype's ulps lie between them (one bf16 ulp is 65,536 f32
// ulps: counted in f32, a bf16 engine's smallest difference would read as a huge one).
// Values the dtype does not hold are shown and counted as f32.
std::string bitwise_text(float got, const std::string& got_run, float expected,
                         const std::string& expected_run, DType output) {
  auto a = dtype_bits(got, output), b = dtype_bits(expected, output);
  const DType shown = a && b ? output : DType::f32;
  if (shown != output) a = dtype_bits(got, shown), b = dtype_bits(expected, shown);
  const auto text = [&](float x, const std::optional<DTypeBits>& bits, const std::string& run) {
    char buffer[96];
    if (shown == DType::f32 || !bits) {
      std::snprintf(buffer, sizeof buffer, "0x%08x (%.9g)", std::bit_cast<uint32_t>(x), x);
    } else {
      std::snprintf(buffer, sizeof buffer, "0x%04x (%.9g)", bits->bits, x);
    }
    return std::string(buffer) + " " + run;
  };
  std::string out = "the engine claims this invariance bit for bit: got " + text(got, a, got_run) +
                    ", expected " + text(expected, b, expected_run);
  if (a && b) {
    const int64_t d = a->line - b->line;
    const auto n = static_cast<uint64_t>(d < 0 ? -d : d);
    out += ", " + std::to_string(n) + " " + std::string(dtype_name(shown)) +
           (n == 1 ? " ulp" : " ulps") + " apart";
    if (shown != output) out += " (not both " + std::string(dtype_name(output)) + " values)";
  }
  return out;
}

bool same_value(double a, double b, double tolerance) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= tolerance;
}

struct Base {
  const Scenario& scenario;
  const Prepared& prepared;
  const EngineRun& run;
  const std::vector<const EngineRow*>& rows;
};

struct Found {
  size_t slot = 0;  // base slot, for "first in program order" across variants
  Divergence divergence;
};

// The variant's run, its rows by slot, and its slots by the base key each maps to.
// Not movable: `rows` points into `run`.
struct VariantRun {
  VariantRun(const ScenarioVariant& variant, const EngineInfo& engine)
      : run(run_once(variant.scenario, TokenTable(variant.scenario.tokens, variant.scenario.layout),
                     engine)),
        slots(expected_slots(variant.scenario)),
        rows(rows_by_slot(slots, run)) {
    for (size_t s = 0; s < slots.size(); ++s) {
      const RowKey& key = slots[s].key;
      const auto mapped = variant.streams.find({key.seq, key.epoch});
      if (mapped == variant.streams.end()) continue;
      by_base_key.emplace(RowKey{mapped->second.first, mapped->second.second, key.pos}, s);
    }
  }
  VariantRun(const VariantRun&) = delete;
  VariantRun& operator=(const VariantRun&) = delete;

  const EngineRun run;
  const std::vector<ExpectedSlot> slots;
  const std::vector<const EngineRow*> rows;
  std::map<RowKey, size_t> by_base_key;
};

// How a report names the variant's row for a base row.
std::string twin_text(const ExpectedSlot& twin) {
  return "the variant's row for it is " + to_string(twin.key) + " (" + to_string(twin.origin) + ")";
}

// The first value at which two rows of the right size differ: a non-finite value in one run
// only, then (bitwise) different bits, else a distance past twice the reference's bound
// (`ref`'s). `d` holds the row's key, origin and visible keys.
std::optional<Divergence> compare_values(Divergence d, const Base& base, const ReferenceRow& ref,
                                         const EngineRow& got, const EngineRow& want,
                                         const ExpectedSlot& twin, bool bitwise) {
  const auto value_dim = static_cast<size_t>(base.scenario.layout.value_dim);
  const size_t size = got.values.size();
  const DType output = base.prepared.numerics.output;
  d.output = output;
  const auto at = [&](FailureKind kind, size_t i) {
    const auto h = i / value_dim;
    d.kind = kind;
    d.q_head = static_cast<int>(h);
    d.dim = static_cast<int>(i % value_dim);
    d.got = got.values[i];
    d.expected = want.values[i];
    d.error = std::fabs(d.got - d.expected);
    d.bound = 2 * accepted_error(ref.bound[h], ref.values[i], output);
    d.detail = "got: the variant run (" + twin_text(twin) +
               "); expected: the base run; bound: twice the reference's";
    return d;
  };
  for (size_t i = 0; i < size; ++i) {
    const double x = got.values[i], y = want.values[i];
    if ((!std::isfinite(x) || !std::isfinite(y)) && !same_value(x, y, 0)) {
      return at(FailureKind::not_finite, i);
    }
  }
  // A claimed invariance: the same bits (after the non-finite check, so that a NaN in one
  // run only is not_finite in either mode).
  if (bitwise) {
    for (size_t i = 0; i < size; ++i) {
      const float x = got.values[i], y = want.values[i];
      if (std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y)) continue;
      Divergence found = at(FailureKind::mismatch, i);
      found.bound = 0;
      found.detail = bitwise_text(x, "(the variant run: " + twin_text(twin) + ")", y,
                                  "(the base run)", output);
      return found;
    }
    return std::nullopt;
  }
  for (size_t i = 0; i < size; ++i) {
    // Each run within its accepted error of the reference, so twice that of each other.
    const double tolerance = 2 * accepted_error(ref.bound[i / value_dim], ref.values[i], output);
    if (!same_value(got.values[i], want.values[i], tolerance)) {
      return at(FailureKind::mismatch, i);
    }
  }
  return std::nullopt;
}

// Base slot b against its twin, the variant's slot `t`: a row missing from one run, a
// different position, or different values; nullopt when they agree.
std::optional<Divergence> compare_slot(const Base& base, size_t b, const VariantRun& variant,
                                       size_t t, bool bitwise) {
  const ExpectedSlot& slot = base.prepared.slots[b];
  const ExpectedSlot& twin = variant.slots[t];
  const EngineRow* got = base.rows[b];
  const EngineRow* want = variant.rows[t];
  const ReferenceRow& ref = base.prepared.reference.at(slot.key);

  Divergence d;
  d.key = slot.key;
  d.origin = slot.origin;
  d.key_lo = ref.key_lo;
  d.key_hi = ref.key_hi;
  if (got == nullptr || want == nullptr) {
    if (got == nullptr && want == nullptr) return std::nullopt;
    // Both runs failed; the rows they share agree.
    if (base.run.error && variant.run.error) return std::nullopt;
    d.kind = failure_kind_of(got == nullptr ? base.run.error_kind : variant.run.error_kind);
    d.detail = got == nullptr ? "the base run produced no row here: " + base.run.error.value_or("")
                              : "the variant run produced no row here (" + twin_text(twin) +
                                    "): " + variant.run.error.value_or("");
    return d;
  }
  if (got->key.pos != want->key.pos) {
    d.kind = FailureKind::wrong_position;
    d.detail = "the base run reported this token at position " + std::to_string(got->key.pos) +
               ", the variant at position " + std::to_string(want->key.pos) + "; " +
               twin_text(twin);
    return d;
  }
  const size_t size = static_cast<size_t>(base.scenario.layout.q_heads) *
                      static_cast<size_t>(base.scenario.layout.value_dim);
  if (got->values.size() != size || want->values.size() != size) {
    return std::nullopt;  // runner-checked
  }
  // The variant is what is judged, against the base run: got is the variant's row.
  return compare_values(std::move(d), base, ref, *want, *got, twin, bitwise);
}

// Every row agrees, but the variant failed where the base did not (after its last compared
// row, say on a reset): the same engine, changed only in the property's dimension, fails.
std::optional<Found> variant_failed_alone(const Base& base, const EngineRun& run) {
  if (!run.error || base.run.error) return std::nullopt;
  Divergence d;
  d.kind = failure_kind_of(run.error_kind);
  d.origin = run.error_at.value_or(RowOrigin{});
  d.key_lo = 0;
  d.key_hi = -1;  // no row
  d.detail = "the variant run failed at its " + to_string(run.error_at.value_or(RowOrigin{})) +
             " and the base run did not: " + *run.error;
  return Found{base.prepared.slots.size(), d};
}

// The first base slot (in program order) whose row the variant changes.
std::optional<Found> first_difference(const Base& base, const ScenarioVariant& variant,
                                      const EngineInfo& engine, bool bitwise) {
  const VariantRun run(variant, engine);
  for (size_t b = 0; b < base.prepared.slots.size(); ++b) {
    const auto match = run.by_base_key.find(base.prepared.slots[b].key);
    if (match == run.by_base_key.end()) continue;
    if (std::optional<Divergence> d = compare_slot(base, b, run, match->second, bitwise)) {
      return Found{b, std::move(*d)};
    }
  }
  return variant_failed_alone(base, run.run);
}

}  // namespace

std::string property_headline(Property property, const EngineInfo& engine, std::string_view claim,
                              std::string_view level) {
  return std::string(property_name(property)) + std::string(level) + ": engine '" + engine.name +
         "' breaks the property that " +
         std::string(claim.empty() ? property_info(property).claim : claim) + "\n";
}

PropertyOutcome judge_prefix(const Scenario& scenario, const Prepared& prepared,
                             const EngineInfo& engine) {
  const CheckOutcome outcome = judge_engine(scenario, prepared, engine);
  PropertyOutcome result;
  result.rows_compared = outcome.verdict.rows_compared;
  result.rows_unjudged = outcome.verdict.rows_unjudged;
  result.bound_used = outcome.verdict.bound_used;
  if (outcome.verdict.pass) {
    result.report = "prefix: pass (" + std::to_string(outcome.verdict.rows_compared) + " rows)\n";
    return result;
  }
  const Divergence& first = *outcome.verdict.first;
  result.pass = false;
  result.signature = FailureSignature{Property::prefix, first.kind};
  result.first = first;
  result.report = property_headline(Property::prefix, engine) + describe_divergence(first);
  return result;
}

PropertyOutcome judge_attention_property(Property property, const Scenario& scenario,
                                         const EngineInfo& engine) {
  if (property == Property::prefix) return judge_prefix(scenario, prepare(scenario), engine);

  const std::vector<ScenarioVariant> variants = property_variants(property, scenario);
  PropertyOutcome result;
  if (variants.empty()) {
    result.report = std::string(property_name(property)) + ": pass (no variant differs)\n";
    return result;
  }

  BitwiseClaims claims;
  EngineNumerics numerics;
  const EngineRun run =
      run_once(scenario, TokenTable(scenario.tokens, scenario.layout), engine, &claims, &numerics);
  const Prepared prepared = prepare(scenario, numerics);
  const bool bitwise = claims_bitwise(property, claims);
  const std::vector<const EngineRow*> rows = rows_by_slot(prepared.slots, run);
  const Base base{scenario, prepared, run, rows};
  std::optional<Found> first;
  const ScenarioVariant* culprit = nullptr;
  for (const ScenarioVariant& variant : variants) {
    std::optional<Found> found = first_difference(base, variant, engine, bitwise);
    if (found && (!first || found->slot < first->slot)) {
      first = std::move(found);
      culprit = &variant;
    }
  }
  if (!first) {
    result.report = std::string(property_name(property)) + ": pass (" +
                    std::to_string(variants.size()) +
                    (variants.size() == 1 ? " variant: " + variants[0].description : " variants") +
                    (bitwise ? ", bit for bit" : "") + ")\n";
    return result;
  }
  result.pass = false;
  result.signature = FailureSignature{property, first->divergence.kind};
  result.first = first->divergence;
  result.report = property_headline(property, engine) + "  variant: " + culprit->description +
                  "\n" + describe_divergence(first->divergence);
  return result;
}

}  // namespace kvfuzz
