// Scenario builders shared by the tests: layouts by field name, the worked example (README.md,
// docs/architecture.md) and its pieces.
#pragma once

#include <optional>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz::test {

// Layout's fields by name, each defaulting to Layout's own default. `Layout{.q_heads = 2}`
// would do, but g++ -Wextra flags the optional fields it leaves out (they have no default
// member initializer); make_layout({.q_heads = 2}) says the same without the warning.
// Fields in Layout's order, as designated initializers require.
struct LayoutFields {
  int q_heads = Layout{}.q_heads;
  int kv_heads = Layout{}.kv_heads;
  int head_dim = Layout{}.head_dim;
  int value_dim = Layout{}.value_dim;
  int page_size = Layout{}.page_size;
  DType dtype = Layout{}.dtype;
  std::optional<double> rope_theta = Layout{}.rope_theta;
  RopeStyle rope_style = Layout{}.rope_style;
  std::optional<int> rope_dims = Layout{}.rope_dims;
  std::optional<int> window = Layout{}.window;
  std::optional<double> scale = Layout{}.scale;
  std::optional<double> softcap = Layout{}.softcap;
  std::vector<double> sinks = Layout{}.sinks;
  std::vector<double> alibi = Layout{}.alibi;
  std::optional<int> chunked_local = Layout{}.chunked_local;
  KvFormat k_format = Layout{}.k_format;
  KvFormat v_format = Layout{}.v_format;
};

// Every field given: g++ -Wextra flags a field added to Layout and missing here.
inline Layout make_layout(const LayoutFields& f) {
  return Layout{f.q_heads,    f.kv_heads,   f.head_dim,      f.value_dim, f.page_size, f.dtype,
                f.rope_theta, f.rope_style, f.rope_dims,     f.window,    f.scale,     f.softcap,
                f.sinks,      f.alibi,      f.chunked_local, f.k_format,  f.v_format};
}

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
