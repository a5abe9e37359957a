// Where a failing fixture came from (Provenance, kvfuzz/scenario.h), stamped one way by
// every tool that writes one: kvfuzz check and shrink, the campaign, the engine tests, the
// fuzz targets and the property suites.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/verdict.h"

namespace kvfuzz {

// The first line of the report of `first`: what a fixture records as its failure.
std::string failure_line(const Divergence& first);
// The failure line of the outcome's first diverging row, else its report's first line.
std::string failure_line(const PropertyOutcome& outcome);

// Marks `scenario` as a failure that `source` (check, shrink or fuzz) found on `engine`:
// the source, the engine, the property when one judged it, the failure line and this
// kvfuzz's version. What it does not name (a generated case's seed) stays as it was.
void stamp_failure(Scenario& scenario, std::string_view source, std::string_view engine,
                   std::optional<Property> property, std::string failure);

// The property a fixture records it fails (prefix when it records none or an unknown one):
// what a replay judges besides prefix.
Property recorded_property(const Scenario& scenario);

}  // namespace kvfuzz
