// The six properties (docs/architecture.md, "Judge"), as functions of (scenario, engine), so that
// the RapidCheck suites, `kvfuzz shrink --property`, the engine tests and the fuzz targets all
// judge a scenario the same way. What each one claims is its row of kProperties below.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "kvfuzz/engine.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/verdict.h"

namespace kvfuzz {

struct Prepared;  // kvfuzz/judge.h

enum class Property { prefix, schedule, layout, poison, reset, batch };

// One row per property: the name that --property, fixtures and file names spell, and the
// claim it makes, as a failure's report states it ("breaks the property that CLAIM").
// prefix compares an engine with the reference; the other five are invariances that
// compare it with itself on variants of the scenario changed in the property's dimension
// only (the judge's property_variants.h builds them).
struct PropertyInfo {
  Property property;
  std::string_view name;
  std::string_view claim;
};

inline constexpr std::array<PropertyInfo, 6> kProperties = {{
    {Property::prefix, "prefix", "every cached row equals the reference row at the same key"},
    {Property::schedule, "schedule",
     "another chunk schedule of the same token streams gives the same rows"},
    {Property::layout, "layout", "another page size and page order give the same rows"},
    {Property::poison, "poison", "another poison outside the valid prefix gives the same rows"},
    {Property::reset, "reset", "after a reset, a request's rows equal those of a fresh engine"},
    {Property::batch, "batch", "a sequence's rows do not depend on its batch neighbours"},
}};

// The properties alone, in the table's order.
inline constexpr std::array<Property, kProperties.size()> kAllProperties = [] {
  std::array<Property, kProperties.size()> all{};
  for (size_t i = 0; i < kProperties.size(); ++i) all[i] = kProperties[i].property;
  return all;
}();

const PropertyInfo& property_info(Property property);
std::string_view property_name(Property property);
std::optional<Property> parse_property(std::string_view name);

// What a shrinker keeps constant: a candidate counts as "the same failure" only if it
// fails the same property with the same kind of divergence.
struct FailureSignature {
  Property property = Property::prefix;
  FailureKind kind = FailureKind::mismatch;
  bool operator==(const FailureSignature&) const = default;
};

std::string to_string(const FailureSignature& signature);  // "prefix/mismatch"

struct PropertyOutcome {
  bool pass = true;
  std::optional<FailureSignature> signature;  // when it fails
  std::optional<Divergence> first;            // the first diverging row
  std::string report;                         // several lines for a person
  // prefix: the rows compared with the reference (a model scenario's logits rows), and of
  // them the rows only checked for finiteness (Verdict; none at model level); 0 for the
  // other properties.
  int rows_compared = 0;
  int rows_unjudged = 0;
  double bound_used = 0;  // prefix: Verdict::bound_used
};

PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const EngineInfo& engine);
// The same with the scenario's plain reference already prepared (prepare(scenario), as
// replay holds it for every engine): prefix judges against it instead of preparing it
// again; the other properties and model scenarios prepare what they need themselves.
PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const Prepared& prepared, const EngineInfo& engine);

}  // namespace kvfuzz
