#include "shrink/canonical.h"

#include <variant>
#include <vector>

#include "shrink/moves.h"
#include "shrink/token_data.h"

namespace kvfuzz::shrinking {

std::optional<Scenario> canonical_form(const Scenario& s) {
  // compact_tokens' candidates 1 (a generated table cut to the ids used) and 2 (an explicit
  // table's unused entries dropped, the rest renumbered): exactly the changes that keep
  // every value the program reads. Candidate 0 (generated made explicit) changes the text,
  // not the values, and makes it longer: not canonical.
  Scenario out;
  // No id used at all (a program of resets): one entry is enough (compaction leaves such a
  // table alone, since the move keeps what it renumbers).
  const auto* table = std::get_if<std::vector<ExplicitToken>>(&s.tokens);
  if (!s.model && table && table->size() > 1 && first_use_order(s).empty()) {
    out = s;
    std::get<std::vector<ExplicitToken>>(out.tokens).resize(1);
    return out;
  }
  for (const int index : {1, 2}) {
    if (compact_tokens(s, index, out) == Made::candidate) {
      out.expect = s.expect;  // the same rows at the same positions: still right
      return out;
    }
  }
  return std::nullopt;
}

std::optional<Scenario> with_generated_table(const Scenario& s, const Scenario& input) {
  if (s.model || !std::holds_alternative<GeneratedTokens>(input.tokens) ||
      !std::holds_alternative<std::vector<ExplicitToken>>(s.tokens)) {
    return std::nullopt;
  }
  Scenario out = s;
  out.tokens = input.tokens;
  if (std::optional<Scenario> cut = canonical_form(out)) return cut;
  return out;
}

}  // namespace kvfuzz::shrinking
