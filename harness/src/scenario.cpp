#include "kvfuzz/scenario.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace kvfuzz {

double Layout::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

int token_count(const TokenSource& source) {
  if (const auto* tokens = std::get_if<std::vector<ExplicitToken>>(&source)) {
    return static_cast<int>(tokens->size());
  }
  return std::get<GeneratedTokens>(source).count;
}

std::vector<Chunk> Op::batch() const {
  switch (kind) {
    case OpKind::append:
      return {Chunk{seq, tokens}};
    case OpKind::step:
      return chunks;
    case OpKind::reset:
      return {};
  }
  return {};
}

Op Op::append(int seq, std::vector<int> tokens) {
  Op op;
  op.kind = OpKind::append;
  op.seq = seq;
  op.tokens = std::move(tokens);
  return op;
}

Op Op::step(std::vector<Chunk> chunks) {
  Op op;
  op.kind = OpKind::step;
  op.chunks = std::move(chunks);
  return op;
}

Op Op::reset(int seq) {
  Op op;
  op.kind = OpKind::reset;
  op.seq = seq;
  return op;
}

std::string_view poison_name(Poison poison) {
  switch (poison) {
    case Poison::nan:
      return "nan";
    case Poison::pos_inf:
      return "+inf";
    case Poison::neg_inf:
      return "-inf";
    case Poison::huge:
      return "huge";
  }
  return "?";
}

std::optional<Poison> parse_poison(std::string_view name) {
  for (Poison p : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    if (poison_name(p) == name) return p;
  }
  return std::nullopt;
}

namespace {

// Walks the program and reports, per sequence, the length of each epoch.
std::map<int, std::vector<int64_t>> epoch_lengths(const Scenario& scenario) {
  std::map<int, std::vector<int64_t>> lengths;
  for (int s = 0; s < scenario.sequences; ++s) lengths[s] = {0};
  for (const Op& op : scenario.program) {
    if (op.kind == OpKind::reset) {
      lengths[op.seq].push_back(0);
      continue;
    }
    for (const Chunk& chunk : op.batch()) {
      lengths[chunk.seq].back() += static_cast<int64_t>(chunk.tokens.size());
    }
  }
  return lengths;
}

}  // namespace

int max_epoch_length(const Scenario& scenario) {
  int64_t longest = 0;
  for (const auto& [seq, epochs] : epoch_lengths(scenario)) {
    for (int64_t n : epochs) longest = std::max(longest, n);
  }
  return static_cast<int>(longest);
}

// Enough pages for every sequence's longest epoch at once, plus one page that is never
// handed out before the others, so a pool always has a poisoned page nobody owns.
int required_pool_pages(const Scenario& scenario) {
  const int64_t page = std::max(1, scenario.layout.page_size);
  int64_t pages = 1;
  for (const auto& [seq, epochs] : epoch_lengths(scenario)) {
    const int64_t longest = *std::max_element(epochs.begin(), epochs.end());
    pages += (longest + page - 1) / page;
  }
  return static_cast<int>(std::min<int64_t>(pages, INT32_MAX));
}

}  // namespace kvfuzz
