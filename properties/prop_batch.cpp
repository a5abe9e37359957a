// batch invariance: a sequence's rows do not depend on its neighbours (isolate_sequence:
// each sequence alone, every step reduced to its own chunk).
// Checked on every honest engine; the property's definition is judge_property
// (kvfuzz/property.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "prop_support.h"

namespace kvfuzz {

RC_GTEST_PROP(BatchInvariance, Contiguous, ()) {
  props::holds(Property::batch, "contiguous");
}
RC_GTEST_PROP(BatchInvariance, Paged, ()) {
  props::holds(Property::batch, "paged");
}
RC_GTEST_PROP(BatchInvariance, Flash, ()) {
  props::holds(Property::batch, "flash");
}

}  // namespace kvfuzz
