// The token data of one scenario (token_data.h): the choices, and the table made once the
// program is known.
#include "generate/token_data.h"

#include <variant>

namespace kvfuzz {

TokenChoices pick_token_choices(ChoiceSource& c) {
  TokenChoices t;
  t.zero_scores = c.pick(0, 3) == 0;
  t.kind = pick_weighted<TokenKind>(c, {{TokenKind::small_int, 4},
                                        {TokenKind::dyadic, 3},
                                        {TokenKind::explicit_small_int, 1},
                                        {TokenKind::uniform, 1},
                                        {TokenKind::wide, 1}});
  t.seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  const bool repeated = rarely(c, 4);
  const int table = c.pick_int(1, 32);
  t.table = repeated ? table : 0;
  t.id_seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  return t;
}

namespace {

// Explicit tables only while they stay small (this many numbers).
constexpr int64_t kMaxExplicitNumbers = 1024;

std::vector<std::vector<double>> small_ints(ChoiceSource& c, int heads, int dim, bool zero) {
  std::vector<std::vector<double>> out(static_cast<size_t>(heads),
                                       std::vector<double>(static_cast<size_t>(dim), 0.0));
  if (zero) return out;
  for (auto& head : out) {
    for (double& x : head) x = zigzag(c.pick(0, 8));  // integers in [-4, 4], 0 first
  }
  return out;
}

}  // namespace

TokenSource make_tokens(ChoiceSource& c, const TokenChoices& t, const Layout& l, int count) {
  const int64_t numbers = int64_t{count} * (int64_t{l.q_heads} * l.head_dim +
                                            int64_t{l.kv_heads} * (l.head_dim + l.value_dim));
  if (t.kind == TokenKind::explicit_small_int && numbers <= kMaxExplicitNumbers) {
    std::vector<ExplicitToken> tokens(static_cast<size_t>(count));
    for (ExplicitToken& token : tokens) {
      token.q = small_ints(c, l.q_heads, l.head_dim, t.zero_scores);
      token.k = small_ints(c, l.kv_heads, l.head_dim, t.zero_scores);
      token.v = small_ints(c, l.kv_heads, l.value_dim, false);
    }
    return tokens;
  }
  GeneratedTokens generated;
  generated.seed = t.seed;
  generated.count = count;
  // Explicit small integers too many to write out are generated small integers.
  generated.distribution = select<TokenKind, Distribution>(
      t.kind, {{TokenKind::small_int, Distribution::small_int},
               {TokenKind::dyadic, Distribution::dyadic},
               {TokenKind::explicit_small_int, Distribution::small_int},
               {TokenKind::uniform, Distribution::uniform},
               {TokenKind::wide, Distribution::wide}});
  generated.zero_scores = t.zero_scores;
  return generated;
}

void fit_explicit_tokens(const Layout& l, bool had_value_from_key, Scenario& s) {
  auto* list = std::get_if<std::vector<ExplicitToken>>(&s.tokens);
  if (list == nullptr) return;
  const auto pad = [](std::vector<std::vector<double>>& heads, int dim) {
    for (auto& head : heads) head.resize(static_cast<size_t>(dim), 0.0);
  };
  for (ExplicitToken& t : *list) {
    if (l.value_from_key) t.v.clear();
    if (had_value_from_key && !l.value_from_key) {
      t.v = t.k;
      pad(t.v, l.value_dim);
    }
    pad(t.q, l.head_dim);
    pad(t.k, l.head_dim);
    pad(t.v, l.value_dim);
  }
}

}  // namespace kvfuzz
