#include "shrink/token_data.h"

#include <algorithm>
#include <span>
#include <variant>

#include "kvfuzz/token_table.h"

namespace kvfuzz::shrinking {

std::vector<ExplicitToken> materialise(const Scenario& scenario) {
  if (const auto* tokens = std::get_if<std::vector<ExplicitToken>>(&scenario.tokens)) {
    return *tokens;
  }
  const Layout& l = scenario.layout;
  const TokenTable table(scenario.tokens, l);
  const auto heads = [](std::span<const float> data, int count, int dims) {
    Values values(static_cast<size_t>(count));
    for (size_t h = 0; h < values.size(); ++h) {
      const auto head = data.subspan(h * static_cast<size_t>(dims), static_cast<size_t>(dims));
      values[h].assign(head.begin(), head.end());
    }
    return values;
  };
  std::vector<ExplicitToken> tokens(static_cast<size_t>(table.count()));
  for (int t = 0; t < table.count(); ++t) {
    ExplicitToken& token = tokens[static_cast<size_t>(t)];
    token.q = heads(table.q(t), l.q_heads, l.head_dim);
    token.k = heads(table.k(t), l.kv_heads, l.head_dim);
    if (!l.value_from_key) token.v = heads(table.v(t), l.kv_heads, l.value_dim);
  }
  return tokens;
}

std::vector<int> first_use_order(const Scenario& s) {
  std::vector<int> order;
  std::vector<bool> seen(static_cast<size_t>(token_count(s.tokens)), false);
  for (const Op& op : s.program) {
    for (const Chunk& chunk : op.batch()) {
      for (int t : chunk.tokens) {
        if (t < 0 || static_cast<size_t>(t) >= seen.size() || seen[static_cast<size_t>(t)])
          continue;
        seen[static_cast<size_t>(t)] = true;
        order.push_back(t);
      }
    }
  }
  return order;
}

bool numbered_in_first_use_order(const std::vector<int>& order, size_t count) {
  if (order.size() != count) return false;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int>(i)) return false;
  }
  return true;
}

int ids_needed(const std::vector<int>& order) {
  return order.empty() ? 1 : *std::max_element(order.begin(), order.end()) + 1;
}

void renumber_ids(Scenario& s, const std::vector<int>& new_id) {
  for (Op& op : s.program) {
    for (int& t : op.tokens) t = new_id[static_cast<size_t>(t)];
    for (Chunk& chunk : op.chunks) {
      for (int& t : chunk.tokens) t = new_id[static_cast<size_t>(t)];
    }
  }
}

}  // namespace kvfuzz::shrinking
