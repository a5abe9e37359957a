// The token data of one scenario: the choices (zero scores, the distribution, seeds,
// sequential or repeated ids) are drawn before the program; the ids are handed out while
// the program is built, from a stream of their own so that the number of tokens never
// shifts later choices; the table (generated, or explicit small integers while small) is
// made once the program says how many ids it used. Zero scores and exact data first, so
// that every row is easy to judge and a wrong key changes it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/prng.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

enum class TokenKind { small_int, dyadic, explicit_small_int, uniform, wide };

// Zero scores first (q = k = 0: every row is a plain mean, every bug a clean one). Then
// exact data (small integers, dyadic fractions, explicit small integers), sometimes
// uniform (rounded in f16/bf16) or wide dynamic range. Token ids: sequential first (every
// appended token is a new table entry, so every position of every sequence has its own
// q/k/v and a row that sees a wrong key changes); sometimes drawn from a small table (the
// same token at several positions).
struct TokenChoices {
  bool zero_scores = true;
  TokenKind kind = TokenKind::small_int;
  uint64_t seed = 0;
  int table = 0;  // 0: sequential ids
  uint64_t id_seed = 0;
};

TokenChoices pick_token_choices(ChoiceSource& c);

// Hands out token ids: sequential, or from the small table in a stream of its own (one
// choice, its seed, so that the number of tokens never shifts later choices).
class TokenIds {
 public:
  explicit TokenIds(const TokenChoices& t) : table_(t.table), rng_(t.id_seed) {}
  std::vector<int> take(int n) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int& id : ids) {
      id = table_ > 0 ? static_cast<int>(rng_.below(static_cast<uint64_t>(table_))) : next_++;
    }
    return ids;
  }
  int count() const { return table_ > 0 ? table_ : std::max(1, next_); }

 private:
  int table_;
  int next_ = 0;
  Xoshiro256 rng_;
};

// The token table for `count` ids: explicit small integers while they stay small (their
// values drawn here, last), otherwise generated from the token seed.
TokenSource make_tokens(ChoiceSource& c, const TokenChoices& t, const Layout& l, int count);

// Explicit tokens fitted to the layout's dims after a later piece changed them: under MLA
// a token has no v (read from k); an MLA value turned off (`had_value_from_key`) becomes its
// key's prefix again; every row is padded with zeros (a zero q or k element adds nothing to
// a score, a zero v element is a zero output element) or cut to a smaller group. Generated
// tokens need nothing: the table draws them at the layout's dims.
void fit_explicit_tokens(const Layout& l, bool had_value_from_key, Scenario& s);

}  // namespace kvfuzz
