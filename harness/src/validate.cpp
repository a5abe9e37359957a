// PLACEHOLDER: replaced by the full cross-field validation (see scenario.h).
#include "kvfuzz/scenario.h"

namespace kvfuzz {

std::optional<FieldError> validate(const Scenario&) { return std::nullopt; }

}  // namespace kvfuzz
