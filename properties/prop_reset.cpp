// reset isolation: after a reset (or a truncate or fork), a request's rows equal those
// of a fresh engine fed the same logical prefix (isolate_epochs).
// Checked on every honest engine; the property's definition is judge_property
// (kvfuzz/property.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "prop_support.h"

namespace kvfuzz {

RC_GTEST_PROP(ResetIsolation, Contiguous, ()) {
  props::holds(Property::reset, "contiguous");
}
RC_GTEST_PROP(ResetIsolation, Paged, ()) {
  props::holds(Property::reset, "paged");
}
RC_GTEST_PROP(ResetIsolation, Flash, ()) {
  props::holds(Property::reset, "flash");
}

}  // namespace kvfuzz
