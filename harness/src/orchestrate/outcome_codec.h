// A PropertyOutcome as JSON, whole (its first divergence included, doubles bit for bit), so
// that a judgement made in a forked child (Isolation) comes back as the same outcome a
// judgement in this process gives: the same report, failure line and signature.
#pragma once

#include <nlohmann/json.hpp>

#include "kvfuzz/property.h"

namespace kvfuzz::orchestrate {

nlohmann::json outcome_to_json(const PropertyOutcome& outcome);
// Throws nlohmann::json::exception on JSON that is no encoded outcome.
PropertyOutcome outcome_from_json(const nlohmann::json& j);

}  // namespace kvfuzz::orchestrate
