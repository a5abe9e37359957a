// The six properties of DESIGN.md, as functions of (scenario, engine), so that the
// RapidCheck suites, `kvfuzz shrink --property`, and later the fuzz targets all judge a
// scenario the same way.
//
//   prefix    every cached row equals the reference row at the same key
//   schedule  the same token streams under another chunk schedule give the same rows
//   layout    page size and physical page order do not change any row
//   poison    what the bytes outside the valid prefix hold does not change any row
//   reset     after a reset, a request's rows equal those of a fresh engine
//   batch     batch neighbours do not change a sequence's rows
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "kvfuzz/engine.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/verdict.h"

namespace kvfuzz {

enum class Property { prefix, schedule, layout, poison, reset, batch };

constexpr std::array<Property, 6> kAllProperties = {Property::prefix, Property::schedule,
                                                    Property::layout, Property::poison,
                                                    Property::reset,  Property::batch};

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
};

PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const EngineInfo& engine);

}  // namespace kvfuzz
