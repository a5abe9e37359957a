// EngineSupports::rope_required and ::windows (an engine that always rotates and has no
// sliding window, as llama.cpp's llama architecture): the generator makes only such
// scenarios for it, at attention and model level, while the same seeds without them reach
// what they take away; a filter asking for the opposite is named; unsupported_layout names
// a scenario outside them.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {
namespace {

constexpr int kSeeds = 400;

int count_with(const GeneratorOptions& options, const std::function<bool(const Scenario&)>& has) {
  int count = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource choices(seed);
    count += has(generate_scenario(choices, options)) ? 1 : 0;
  }
  return count;
}

bool rotated(const Scenario& s) {
  return s.layout.rope_theta.has_value();
}
bool windowed(const Scenario& s) {
  return s.layout.window.has_value();
}

TEST(GeneratorSupports, RopeRequiredAndNoWindowsHoldForEveryScenario) {
  for (const bool model : {false, true}) {
    GeneratorOptions o;
    if (model) o.model = ModelOptions{};
    EXPECT_LT(count_with(o, rotated), kSeeds) << "model " << model;
    EXPECT_GT(count_with(o, windowed), 0) << "model " << model;
    o.supports.rope_required = true;
    o.supports.windows = false;
    EXPECT_EQ(count_with(o, rotated), kSeeds) << "model " << model;
    EXPECT_EQ(count_with(o, windowed), 0) << "model " << model;
    EXPECT_EQ(count_with(o, [&](const Scenario& s) { return !unsupported_layout(s, o.supports); }),
              kSeeds);
  }
}

TEST(GeneratorSupports, FiltersAgainstThemAreNamed) {
  GeneratorOptions o;
  o.supports.rope_required = true;
  o.filters.rope = OnOff::off;
  auto conflict = filter_conflict(o);
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->filter, FilterConflict::Filter::rope);
  PrngChoiceSource choices(1);
  EXPECT_THROW(generate_scenario(choices, o), std::invalid_argument);
  o.filters.rope = OnOff::any;
  o.max_head_dim = 1;  // RoPE needs head_dim 2
  conflict = filter_conflict(o);
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->filter, FilterConflict::Filter::rope);

  GeneratorOptions w;
  w.supports.windows = false;
  w.filters.window = OnOff::on;
  conflict = filter_conflict(w);
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->filter, FilterConflict::Filter::window);
  w.filters.window = OnOff::any;
  EXPECT_FALSE(filter_conflict(w));
}

TEST(GeneratorSupports, UnsupportedLayoutNamesThem) {
  Scenario s;
  s.layout.head_dim = s.layout.value_dim = 2;
  EngineSupports can;
  EXPECT_FALSE(unsupported_layout(s, can));
  can.rope_required = true;
  const auto no_rope = unsupported_layout(s, can);
  ASSERT_TRUE(no_rope);
  EXPECT_NE(no_rope->find("without RoPE"), std::string::npos) << *no_rope;
  s.layout.rope_theta = 10000.0;
  EXPECT_FALSE(unsupported_layout(s, can));
  s.layout.window = 3;
  EXPECT_FALSE(unsupported_layout(s, can));
  can.windows = false;
  const auto window = unsupported_layout(s, can);
  ASSERT_TRUE(window);
  EXPECT_NE(window->find("sliding window of 3"), std::string::npos) << *window;
}

}  // namespace
}  // namespace kvfuzz
