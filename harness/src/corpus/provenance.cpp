// Provenance of failing fixtures (corpus/provenance.h).
#include "corpus/provenance.h"

#include "judge/report.h"
#include "support/text.h"

namespace kvfuzz {

namespace {}  // namespace

std::string failure_line(const Divergence& first) {
  return first_line(describe_divergence(first));
}

std::string failure_line(const PropertyOutcome& outcome) {
  return outcome.first ? failure_line(*outcome.first) : first_line(outcome.report);
}

void stamp_failure(Scenario& scenario, std::string_view source, std::string_view engine,
                   std::optional<Property> property, std::string failure) {
  Provenance& p = scenario.provenance;
  p.source = std::string(source);
  p.engine = std::string(engine);
  if (property) p.property = std::string(property_name(*property));
  p.failure = std::move(failure);
  p.kvfuzz_version = KVFUZZ_VERSION;
}

Property recorded_property(const Scenario& scenario) {
  return parse_property(scenario.provenance.property.value_or("prefix")).value_or(Property::prefix);
}

}  // namespace kvfuzz
