// Moves on the token table and its values (shrink/moves.h): generated data made explicit,
// the table compacted, equal tokens merged, then values toward 0 and small integers,
// wholesale and one at a time.
#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include "shrink/moves.h"
#include "shrink/token_data.h"

namespace kvfuzz::shrinking {

// Generated data as explicit values; the count down to the largest id used; unused ids
// dropped and the rest renumbered in order of first use. Not at model level: there the
// ids are vocabulary ids (reduce_vocab).
Made compact_tokens(const Scenario& s, int index, Scenario& out) {
  if (index > 2) return Made::end;
  if (s.model) return Made::skip;
  const auto* generated = std::get_if<GeneratedTokens>(&s.tokens);
  if (index == 0) {
    if (!generated) return Made::skip;
    out = start_candidate(s);
    out.tokens = materialise(s);
    return Made::candidate;
  }
  const std::vector<int> order = first_use_order(s);
  if (index == 1) {
    if (!generated) return Made::skip;
    const int used = ids_needed(order);
    if (used >= generated->count) return Made::skip;
    out = start_candidate(s);
    std::get<GeneratedTokens>(out.tokens).count = used;
    return Made::candidate;
  }
  if (generated || order.empty()) return Made::skip;
  const auto& table = std::get<std::vector<ExplicitToken>>(s.tokens);
  if (numbered_in_first_use_order(order, table.size())) return Made::skip;
  std::vector<int> new_id(table.size(), -1);
  std::vector<ExplicitToken> tokens;
  for (int t : order) {
    new_id[static_cast<size_t>(t)] = static_cast<int>(tokens.size());
    tokens.push_back(table[static_cast<size_t>(t)]);
  }
  out = start_candidate(s);
  out.tokens = std::move(tokens);
  renumber_ids(out, new_id);
  return Made::candidate;
}

// Token `index` (from 1) replaced by an earlier token with the same data, or else by
// token 0, and the table compacted: fewer distinct tokens.
Made merge_token_ids(const Scenario& s, int index, Scenario& out) {
  const auto* table = std::get_if<std::vector<ExplicitToken>>(&s.tokens);
  if (table == nullptr) return index == 0 ? Made::skip : Made::end;
  const size_t t = static_cast<size_t>(index) + 1;
  if (t >= table->size()) return Made::end;
  size_t into = 0;
  for (size_t u = 0; u < t; ++u) {
    if ((*table)[u] == (*table)[t]) {
      into = u;
      break;
    }
  }
  Scenario merged = start_candidate(s);
  bool used = false;
  const auto replace = [&](std::vector<int>& tokens) {
    for (int& id : tokens) {
      if (id == static_cast<int>(t)) {
        id = static_cast<int>(into);
        used = true;
      }
    }
  };
  for (Op& op : merged.program) {
    replace(op.tokens);
    for (Chunk& chunk : op.chunks) replace(chunk.tokens);
  }
  if (!used) return Made::skip;  // unused: compaction drops it
  if (compact_tokens(merged, 2, out) != Made::candidate) out = std::move(merged);
  return Made::candidate;
}

// Wholesale: q = k = 0 (zero scores), q = 0, k = 0, every value rounded to an integer.
Made simplify_values_wholesale(const Scenario& s, int index, Scenario& out) {
  if (index > 3) return Made::end;
  if (!std::holds_alternative<std::vector<ExplicitToken>>(s.tokens)) return Made::skip;
  out = start_candidate(s);
  auto& tokens = std::get<std::vector<ExplicitToken>>(out.tokens);
  bool changed = false;
  const auto set = [&changed](double& x, double to) {
    changed = changed || x != to || std::signbit(x) != std::signbit(to);
    x = to;
  };
  switch (index) {
    case 0:
      for_each_value(tokens, true, true, false, [&](double& x) { set(x, 0.0); });
      break;
    case 1:
      for_each_value(tokens, true, false, false, [&](double& x) { set(x, 0.0); });
      break;
    case 2:
      for_each_value(tokens, false, true, false, [&](double& x) { set(x, 0.0); });
      break;
    default:
      for_each_value(tokens, true, true, true, [&](double& x) { set(x, std::round(x) + 0.0); });
      break;
  }
  return changed ? Made::candidate : Made::skip;
}

namespace {

// Simpler values for one number: 0; for a fraction, its rounding, truncation and the
// integer away from zero; for an integer, half of it (toward zero); for a negative, -x.
std::vector<double> simpler_values(double x) {
  std::vector<double> values;
  const auto add = [&values, x](double y) {
    y += 0.0;  // no negative zero
    if ((y != x || std::signbit(y) != std::signbit(x)) &&
        std::find(values.begin(), values.end(), y) == values.end()) {
      values.push_back(y);
    }
  };
  add(0.0);
  if (x == 0) return values;
  if (!is_integer(x)) {
    add(std::round(x));
    add(std::trunc(x));
    add(x < 0 ? std::floor(x) : std::ceil(x));
  } else if (std::fabs(x) >= 2) {
    add(std::trunc(x / 2));
  }
  if (x < 0) add(-x);
  return values;
}

}  // namespace

// One value at a time, token by token (q, then k, then v), each toward 0 and small integers.
Made simplify_value(const Scenario& s, int index, Scenario& out) {
  const auto* table = std::get_if<std::vector<ExplicitToken>>(&s.tokens);
  if (!table) return index == 0 ? Made::skip : Made::end;
  int seen = 0;
  for (size_t t = 0; t < table->size(); ++t) {
    const ExplicitToken& token = (*table)[t];
    const Values* parts[] = {&token.q, &token.k, &token.v};
    for (size_t p = 0; p < 3; ++p) {
      for (size_t h = 0; h < parts[p]->size(); ++h) {
        for (size_t d = 0; d < (*parts[p])[h].size(); ++d) {
          const std::vector<double> values = simpler_values((*parts[p])[h][d]);
          if (index >= seen + static_cast<int>(values.size())) {
            seen += static_cast<int>(values.size());
            continue;
          }
          out = start_candidate(s);
          ExplicitToken& changed = std::get<std::vector<ExplicitToken>>(out.tokens)[t];
          Values* out_parts[] = {&changed.q, &changed.k, &changed.v};
          (*out_parts[p])[h][d] = values[static_cast<size_t>(index - seen)];
          return Made::candidate;
        }
      }
    }
  }
  return Made::end;
}

}  // namespace kvfuzz::shrinking
