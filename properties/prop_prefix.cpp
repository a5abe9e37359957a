// prefix equivalence: every cached row equals the reference row (full-prefix attention in
// double precision) at the same key (sequence, epoch, absolute position).
// Checked on every honest engine; the property's definition is judge_property
// (kvfuzz/property.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "prop_support.h"

namespace kvfuzz {

RC_GTEST_PROP(PrefixEquivalence, Contiguous, ()) {
  props::holds(Property::prefix, "contiguous");
}
RC_GTEST_PROP(PrefixEquivalence, Paged, ()) {
  props::holds(Property::prefix, "paged");
}
RC_GTEST_PROP(PrefixEquivalence, Flash, ()) {
  props::holds(Property::prefix, "flash");
}

// Every suite names the honest engines one by one: a new honest engine must be added there.
TEST(Properties, EverySuiteCoversEveryHonestEngine) {
  std::vector<std::string> honest;
  for (const EngineInfo& engine : engine_registry()) {
    if (!engine.mutant) honest.push_back(engine.name);
  }
  EXPECT_EQ(honest, (std::vector<std::string>{"contiguous", "paged", "flash"}));
}

}  // namespace kvfuzz
