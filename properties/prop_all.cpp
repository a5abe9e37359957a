// The six properties (kvfuzz/property.h, one row of kProperties each) on every honest
// engine: one RapidCheck property per (property, engine), registered as the GoogleTest
// Properties.PROPERTY_on_ENGINE (e.g. Properties.prefix_on_paged). What each property
// claims is its row's claim; how it is judged is judge_property.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "prop_support.h"

namespace kvfuzz {
namespace {

class PropertyCase : public testing::Test {
 public:
  PropertyCase(Property property, std::string engine)
      : property_(property), engine_(std::move(engine)) {}
  // RapidCheck's own runner, as RC_GTEST_PROP runs it: RC_PARAMS (seed, max_success) apply.
  void TestBody() override {
    rc::detail::checkGTest([this] { props::holds(property_, engine_); });
  }

 private:
  Property property_;
  std::string engine_;
};

// Registered before main runs, as TEST() registers its tests.
[[maybe_unused]] const bool registered = [] {
  for (const PropertyInfo& row : kProperties) {
    for (const EngineInfo& engine : engine_registry()) {
      if (engine.mutant) continue;
      const std::string name = std::string(row.name) + "_on_" + engine.name;
      testing::RegisterTest("Properties", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [property = row.property, engine = engine.name]() -> testing::Test* {
                              return new PropertyCase(property, engine);
                            });
    }
  }
  return true;
}();

// The honest engines the cases run on, as the registry lists them: a new honest engine adds
// six cases, and this list says so.
TEST(Properties, CasesCoverTheseHonestEngines) {
  std::vector<std::string> honest;
  for (const EngineInfo& engine : engine_registry()) {
    if (!engine.mutant) honest.push_back(engine.name);
  }
  EXPECT_EQ(honest,
            (std::vector<std::string>{"contiguous", "paged", "flash", "flash-bf16", "flash-f16",
                                      "contiguous-f16acc", "flash-batch-split", "flash-fixed-split",
                                      "flash-split-bf16", "flash-f16-merge", "paged-f16-normalised",
                                      "flash-bf16-rope-tables", "cuda-paged", "cuda-paged-bf16"}));
}

}  // namespace
}  // namespace kvfuzz
