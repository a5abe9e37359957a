// poison invariance: what the bytes outside the valid prefix hold (repoison: finite
// against non-finite) does not change any row.
// Checked on every honest engine; the property's definition is judge_property
// (kvfuzz/property.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "prop_support.h"

namespace kvfuzz {

RC_GTEST_PROP(PoisonInvariance, Contiguous, ()) {
  props::holds(Property::poison, "contiguous");
}
RC_GTEST_PROP(PoisonInvariance, Paged, ()) {
  props::holds(Property::poison, "paged");
}
RC_GTEST_PROP(PoisonInvariance, Flash, ()) {
  props::holds(Property::poison, "flash");
}

}  // namespace kvfuzz
