#include "kvfuzz/simple_generator.h"

#include <array>
#include <numeric>

namespace kvfuzz {

namespace {

Layout pick_layout(ChoiceSource& c) {
  static constexpr std::array<int, 4> kKvHeads{1, 1, 2, 4};
  static constexpr std::array<int, 4> kGroups{1, 2, 3, 4};
  static constexpr std::array<int, 6> kHeadDims{1, 2, 4, 8, 6, 16};
  static constexpr std::array<int, 6> kPageSizes{1, 2, 3, 4, 8, 16};
  Layout layout;
  layout.kv_heads = c.pick_from(kKvHeads);
  layout.q_heads = layout.kv_heads * c.pick_from(kGroups);
  layout.head_dim = c.pick_from(kHeadDims);
  layout.value_dim = c.one_in(3) ? c.pick_int(1, 8) : layout.head_dim;
  layout.page_size = c.pick_from(kPageSizes);
  layout.dtype = static_cast<DType>(c.pick_int(0, 2));
  if (c.one_in(3) && layout.head_dim % 2 == 0) layout.rope_theta = 10000.0;
  if (c.one_in(3)) layout.window = c.pick_int(1, 12);
  return layout;
}

std::vector<int> pick_tokens(ChoiceSource& c, int count, int table_size) {
  std::vector<int> tokens(static_cast<size_t>(count));
  for (int& t : tokens) t = c.pick_int(0, table_size - 1);
  return tokens;
}

// Chunk lengths favour one-token decodes and short prefills, sometimes a long one.
int pick_chunk_length(ChoiceSource& c) {
  switch (c.pick_int(0, 3)) {
    case 0:
      return 1;
    case 1:
      return c.pick_int(1, 4);
    case 2:
      return c.pick_int(1, 12);
    default:
      return c.pick_int(8, 40);
  }
}

}  // namespace

Scenario simple_scenario(ChoiceSource& c) {
  Scenario s;
  s.name = "simple";
  s.layout = pick_layout(c);
  GeneratedTokens tokens;
  tokens.seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  tokens.count = c.pick_int(1, 32);
  tokens.distribution = static_cast<Distribution>(c.pick_int(0, 3));
  tokens.zero_scores = c.one_in(4);
  s.tokens = tokens;
  s.sequences = c.pick_int(1, 3);

  const int ops = c.pick_int(1, 8);
  for (int i = 0; i < ops; ++i) {
    const int kind = c.pick_int(0, 5);
    const int seq = c.pick_int(0, s.sequences - 1);
    if (kind == 0) {
      s.program.push_back(Op::reset(seq));
    } else if (kind == 1 && s.sequences > 1) {
      std::vector<Chunk> chunks;
      for (int other = 0; other < s.sequences; ++other) {
        if (other != seq && c.one_in(2)) continue;
        chunks.push_back({other, pick_tokens(c, pick_chunk_length(c), tokens.count)});
      }
      s.program.push_back(Op::step(std::move(chunks)));
    } else {
      s.program.push_back(Op::append(seq, pick_tokens(c, pick_chunk_length(c), tokens.count)));
    }
  }

  s.placement.poison = static_cast<Poison>(c.pick_int(0, 3));
  switch (c.pick_int(0, 2)) {
    case 0:
      s.placement.order = PageOrder::identity;
      break;
    case 1:
      s.placement.order = PageOrder::reversed;
      break;
    default: {
      // A shuffled pool: Fisher-Yates driven by the choice source.
      s.placement.order = PageOrder::explicit_list;
      s.placement.pages.resize(static_cast<size_t>(required_pool_pages(s)));
      std::iota(s.placement.pages.begin(), s.placement.pages.end(), 0);
      for (size_t i = s.placement.pages.size(); i > 1; --i) {
        std::swap(s.placement.pages[i - 1],
                  s.placement.pages[static_cast<size_t>(c.pick(0, static_cast<int64_t>(i) - 1))]);
      }
    }
  }
  s.provenance.source = "check";
  return s;
}

}  // namespace kvfuzz
