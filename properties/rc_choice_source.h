// RapidCheck drives the one generator (kvfuzz/generator.h): every choice becomes a
// rc::gen::inRange pick inside rc::gen::exec, so RapidCheck's integrated shrinking moves
// each choice toward its lower bound, where the generator keeps its simplest outcome.
//
//   RC_GTEST_PROP(Prefix, Holds, ()) {
//     const Scenario scenario = *kvfuzz::gen_scenario();
//     ...
//   }
//
// A failing property prints the scenario as fixture JSON (showValue below), ready to save
// under corpus/ and replay. Header-only; link kvfuzz_generate, kvfuzz_corpus and rapidcheck.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <limits>
#include <ostream>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Choices from RapidCheck. Valid only while RapidCheck generates: inside rc::gen::exec or a
// property body.
class RcChoiceSource final : public ChoiceSource {
 public:
  int64_t pick(int64_t lo, int64_t hi) override {
    // Even when lo == hi there is a pick: the generator draws a fixed number of choices so
    // that shrinking one choice leaves later ones in place (harness/src/generate/generator.cpp),
    // and skipping empty ranges would shift every later choice whenever a range empties.
    if (hi < std::numeric_limits<int64_t>::max()) return *rc::gen::inRange<int64_t>(lo, hi + 1);
    // inRange's upper bound is exclusive: [lo, INT64_MAX] as [lo - 1, INT64_MAX) + 1, which
    // still shrinks toward lo. The whole int64 range has no such spelling: arbitrary.
    if (lo > std::numeric_limits<int64_t>::min()) return *rc::gen::inRange<int64_t>(lo - 1, hi) + 1;
    return *rc::gen::arbitrary<int64_t>();
  }
};

// Scenarios from the one generator, shrinking with RapidCheck.
inline rc::Gen<Scenario> gen_scenario(GeneratorOptions options = {}) {
  return rc::gen::exec([=] {
    RcChoiceSource choices;
    return generate_scenario(choices, options);
  });
}

// How RapidCheck prints a scenario (found by argument-dependent lookup): the canonical
// fixture, ready to save as a .json file and replay with `kvfuzz replay`.
inline void showValue(const Scenario& scenario, std::ostream& os) {
  try {
    os << "\n" << write_fixture(scenario);
  } catch (const FixtureError& error) {
    os << "<scenario that cannot be written as a fixture: " << error.what() << ">";
  }
}

}  // namespace kvfuzz
