// What the generator's rate tests share: how many of the scenarios of seeds 1..kSeeds have
// a property, each checked valid and inside the engine's supports on the way.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"

namespace kvfuzz::test {

inline constexpr int kSeeds = 1200;

inline int count_with(const GeneratorOptions& options,
                      const std::function<bool(const Scenario&)>& has) {
  int count = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario s = generate_scenario(choices, options);
    EXPECT_FALSE(validate(s)) << seed;
    EXPECT_FALSE(unsupported_layout(s, options.supports)) << seed;
    count += has(s) ? 1 : 0;
  }
  return count;
}

}  // namespace kvfuzz::test
