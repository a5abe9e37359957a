// Scenario builders shared by the tests: the worked example of DESIGN.md and its pieces.
#pragma once

#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz::test {

// One head, head_dim 1, q = k = 0: every visible key gets equal weight, so a row is the
// mean of the values it sees.
inline std::vector<ExplicitToken> zero_score_tokens(const std::vector<double>& values) {
  std::vector<ExplicitToken> tokens;
  for (double v : values) tokens.push_back(ExplicitToken{{{0}}, {{0}}, {{v}}});
  return tokens;
}

// Values 2, 4, 8, 16, 32; three tokens cached, then a chunk at positions 3 and 4: full
// prefix rows 3 and 4 are 7.5 and 12.4.
inline Scenario worked_example() {
  Scenario s;
  s.name = "worked-example";
  s.tokens = zero_score_tokens({2, 4, 8, 16, 32});
  s.program = {Op::append(0, {0, 1, 2}), Op::append(0, {3, 4})};
  return s;
}

}  // namespace kvfuzz::test
