#include "shrink/shrink_candidates.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <variant>

#include "kvfuzz/token_table.h"
#include "scenario/limits.h"

namespace kvfuzz::shrinking {

namespace {

using Values = std::vector<std::vector<double>>;  // [head][dim]

// One chunk of the program: an append's tokens (chunk < 0) or chunk `chunk` of a step.
struct ChunkRef {
  size_t op = 0;
  int chunk = -1;
};

std::vector<ChunkRef> chunk_refs(const Scenario& s) {
  std::vector<ChunkRef> refs;
  for (size_t o = 0; o < s.program.size(); ++o) {
    const Op& op = s.program[o];
    if (op.kind == OpKind::append) refs.push_back({o, -1});
    if (op.kind == OpKind::step) {
      for (size_t c = 0; c < op.chunks.size(); ++c) refs.push_back({o, static_cast<int>(c)});
    }
  }
  return refs;
}

const std::vector<int>& tokens_at(const Scenario& s, ChunkRef r) {
  const Op& op = s.program[r.op];
  return r.chunk < 0 ? op.tokens : op.chunks[static_cast<size_t>(r.chunk)].tokens;
}

std::vector<int>& tokens_at(Scenario& s, ChunkRef r) {
  Op& op = s.program[r.op];
  return r.chunk < 0 ? op.tokens : op.chunks[static_cast<size_t>(r.chunk)].tokens;
}

// The parts a bisection level cuts n items into: level k has k parts, [j n / k, (j+1) n / k).
std::pair<int, int> part(int n, int k, int j) {
  return {static_cast<int>(int64_t{j} * n / k), static_cast<int>(int64_t{j + 1} * n / k)};
}

// Copies `s` for a candidate. Hand-derived expect rows never survive a change: a shrunk
// fixture has none (the reference, not `expect`, judges engines).
Scenario start_candidate(const Scenario& s) {
  Scenario out = s;
  out.expect.clear();
  return out;
}

bool is_integer(double x) {
  return std::trunc(x) == x;
}

// ---------------------------------------------------------------------------------------
// Program moves.

Made drop_expect(const Scenario& s, int index, Scenario& out) {
  if (index > 0) return Made::end;
  if (s.expect.empty()) return Made::skip;
  out = start_candidate(s);
  return Made::candidate;
}

// Drops sequence `index` with every op and chunk that touches it; later sequences move
// down by one.
Made drop_sequence(const Scenario& s, int index, Scenario& out) {
  if (index >= s.sequences) return Made::end;
  if (s.sequences == 1) return Made::skip;
  const auto renumber = [index](int seq) { return seq > index ? seq - 1 : seq; };
  out = start_candidate(s);
  out.sequences = s.sequences - 1;
  out.program.clear();
  for (const Op& op : s.program) {
    Op kept = op;
    switch (op.kind) {
      case OpKind::append:
      case OpKind::reset:
      case OpKind::truncate:
        if (op.seq == index) continue;
        kept.seq = renumber(op.seq);
        break;
      case OpKind::fork:
        if (op.seq == index || op.src == index) continue;
        kept.seq = renumber(op.seq);
        kept.src = renumber(op.src);
        break;
      case OpKind::step:
        kept.chunks.clear();
        for (const Chunk& chunk : op.chunks) {
          if (chunk.seq != index) kept.chunks.push_back({renumber(chunk.seq), chunk.tokens});
        }
        if (kept.chunks.empty()) continue;
        break;
    }
    out.program.push_back(std::move(kept));
  }
  return Made::candidate;
}

// Drops a run of ops: halves of the program, then quarters, ..., then single ops.
Made drop_ops(const Scenario& s, int index, Scenario& out) {
  const int n = static_cast<int>(s.program.size());
  int seen = 0;
  for (int k = 2; k < 2 * n; k *= 2) {
    for (int j = 0; j < k; ++j) {
      const auto [begin, end] = part(n, k, j);
      if (begin == end || end - begin == n) continue;
      if (seen++ != index) continue;
      out = start_candidate(s);
      out.program.erase(out.program.begin() + begin, out.program.begin() + end);
      return Made::candidate;
    }
  }
  return Made::end;
}

// Drops one chunk of a step that has several.
Made drop_chunk(const Scenario& s, int index, Scenario& out) {
  int seen = 0;
  for (size_t o = 0; o < s.program.size(); ++o) {
    const Op& op = s.program[o];
    if (op.kind != OpKind::step || op.chunks.size() < 2) continue;
    for (size_t c = 0; c < op.chunks.size(); ++c) {
      if (seen++ != index) continue;
      out = start_candidate(s);
      auto& chunks = out.program[o].chunks;
      chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(c));
      return Made::candidate;
    }
  }
  return Made::end;
}

// Drops tokens from chunks, level by level over every chunk: each chunk's halves (front,
// back), then quarters, ..., then single tokens. Never a whole chunk (drop_ops does that).
Made drop_tokens(const Scenario& s, int index, Scenario& out) {
  const std::vector<ChunkRef> refs = chunk_refs(s);
  int longest = 0;
  for (const ChunkRef& r : refs)
    longest = std::max(longest, static_cast<int>(tokens_at(s, r).size()));
  int seen = 0;
  for (int k = 2; k < 2 * longest; k *= 2) {
    for (const ChunkRef& r : refs) {
      const int n = static_cast<int>(tokens_at(s, r).size());
      if (k >= 2 * n) continue;  // this chunk already reached single tokens
      for (int j = 0; j < k; ++j) {
        const auto [begin, end] = part(n, k, j);
        if (begin == end || end - begin == n) continue;
        if (seen++ != index) continue;
        out = start_candidate(s);
        auto& tokens = tokens_at(out, r);
        tokens.erase(tokens.begin() + begin, tokens.begin() + end);
        return Made::candidate;
      }
    }
  }
  return Made::end;
}

// Merges op `index` and the next one when both are appends of the same sequence.
Made merge_appends(const Scenario& s, int index, Scenario& out) {
  const size_t i = static_cast<size_t>(index);
  if (i + 1 >= s.program.size()) return Made::end;
  const Op& a = s.program[i];
  const Op& b = s.program[i + 1];
  if (a.kind != OpKind::append || b.kind != OpKind::append || a.seq != b.seq) return Made::skip;
  out = start_candidate(s);
  auto& tokens = out.program[i].tokens;
  tokens.insert(tokens.end(), b.tokens.begin(), b.tokens.end());
  out.program.erase(out.program.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  return Made::candidate;
}

// A step with a single chunk becomes an append.
Made step_to_append(const Scenario& s, int index, Scenario& out) {
  const size_t i = static_cast<size_t>(index);
  if (i >= s.program.size()) return Made::end;
  const Op& op = s.program[i];
  if (op.kind != OpKind::step || op.chunks.size() != 1) return Made::skip;
  out = start_candidate(s);
  out.program[i] = Op::append(op.chunks[0].seq, op.chunks[0].tokens);
  return Made::candidate;
}

// Truncate and fork toward the plain reset (which also starts a new epoch), then a
// truncate's `keep` toward 0.
Made simplify_epoch_ops(const Scenario& s, int index, Scenario& out) {
  const size_t i = static_cast<size_t>(index / 4);
  const int variant = index % 4;
  if (i >= s.program.size()) return Made::end;
  const Op& op = s.program[i];
  if (op.kind != OpKind::truncate && op.kind != OpKind::fork) return Made::skip;
  out = start_candidate(s);
  if (variant == 0) {
    out.program[i] = Op::reset(op.seq);
    return Made::candidate;
  }
  if (op.kind != OpKind::truncate) return Made::skip;
  const int64_t keep[] = {0, op.keep / 2, op.keep - 1};
  const int64_t target = keep[variant - 1];
  if (target < 0 || target >= op.keep) return Made::skip;
  out.program[i].keep = target;
  return Made::candidate;
}

// Used token ids in order of first use.
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

// ---------------------------------------------------------------------------------------
// Model moves (model level only). No move changes the seed: the weights change entirely
// with it, so a smaller seed is not a simpler model.

// Smaller sizes of a model field, smallest first: 1, half, one less.
std::vector<int> smaller_sizes(int current) {
  std::vector<int> sizes;
  for (int size : {1, current / 2, current - 1}) {
    if (size >= 1 && size < current && std::find(sizes.begin(), sizes.end(), size) == sizes.end())
      sizes.push_back(size);
  }
  return sizes;
}

// Fewer layers, a narrower residual stream, a narrower MLP. Layers go from the end: the
// weights are drawn from one stream in order (embedding, then layer by layer), so dropping
// the last layers keeps the others' weights; a layer in the middle cannot go alone (the
// fixture holds a count, not a list of layers).
Made reduce_model_size(const Scenario& s, int index, Scenario& out) {
  if (!s.model) return index == 0 ? Made::skip : Made::end;
  const ModelConfig& m = *s.model;
  int seen = 0;
  int ModelConfig::*fields[] = {&ModelConfig::layers, &ModelConfig::width, &ModelConfig::ffn};
  for (int ModelConfig::*field : fields) {
    for (int size : smaller_sizes(m.*field)) {
      if (seen++ != index) continue;
      out = start_candidate(s);
      (*out.model).*field = size;
      return Made::candidate;
    }
  }
  return Made::end;
}

// Replaces every id of `s`'s program by new_id[id].
void renumber_ids(Scenario& s, const std::vector<int>& new_id) {
  for (Op& op : s.program) {
    for (int& t : op.tokens) t = new_id[static_cast<size_t>(t)];
    for (Chunk& chunk : op.chunks) {
      for (int& t : chunk.tokens) t = new_id[static_cast<size_t>(t)];
    }
  }
}

void set_vocab(Scenario& s, int vocab) {
  s.model->vocab = vocab;
  s.tokens = GeneratedTokens{0, vocab, Distribution::small_int, false};
}

// A smaller vocabulary: down to the largest id used + 1 (the ids kept), then the used ids
// renumbered in order of first use (0, 1, 2, ...) and the vocabulary down to their count.
Made reduce_vocab(const Scenario& s, int index, Scenario& out) {
  if (index > 1) return Made::end;
  if (!s.model) return Made::skip;
  const int vocab = s.model->vocab;
  const std::vector<int> order = first_use_order(s);
  if (index == 0) {
    const int used = order.empty() ? 1 : *std::max_element(order.begin(), order.end()) + 1;
    if (used >= vocab) return Made::skip;
    out = start_candidate(s);
    set_vocab(out, used);
    return Made::candidate;
  }
  bool identity = static_cast<int>(order.size()) == vocab;
  for (size_t i = 0; identity && i < order.size(); ++i) identity = order[i] == static_cast<int>(i);
  if (identity || order.empty()) return Made::skip;
  std::vector<int> new_id(static_cast<size_t>(vocab), -1);
  for (size_t i = 0; i < order.size(); ++i)
    new_id[static_cast<size_t>(order[i])] = static_cast<int>(i);
  out = start_candidate(s);
  renumber_ids(out, new_id);
  set_vocab(out, static_cast<int>(order.size()));
  return Made::candidate;
}

// Fewer distinct words: every use of the `index + 1`-th id in order of first use becomes
// the first id used.
Made merge_vocab_ids(const Scenario& s, int index, Scenario& out) {
  if (!s.model) return index == 0 ? Made::skip : Made::end;
  const std::vector<int> order = first_use_order(s);
  const size_t i = static_cast<size_t>(index) + 1;
  if (i >= order.size()) return Made::end;
  std::vector<int> new_id(static_cast<size_t>(s.model->vocab));
  for (size_t t = 0; t < new_id.size(); ++t) new_id[t] = static_cast<int>(t);
  new_id[static_cast<size_t>(order[i])] = order[0];
  out = start_candidate(s);
  renumber_ids(out, new_id);
  return Made::candidate;
}

// ---------------------------------------------------------------------------------------
// Layout moves. Token data is rewritten to the new shapes (materialised first when it was
// generated), keeping the chosen heads and dims.

std::vector<int> range_of(int begin, int end) {
  std::vector<int> indices;
  for (int i = begin; i < end; ++i) indices.push_back(i);
  return indices;
}

// Keeps the heads (or dims) listed in `keep`, in that order.
template <typename T>
void keep_only(std::vector<T>& items, const std::vector<int>& keep) {
  std::vector<T> kept;
  for (int i : keep) kept.push_back(items[static_cast<size_t>(i)]);
  items = std::move(kept);
}

struct HeadChoice {
  std::vector<int> q, kv;  // the q heads and kv heads kept
};

// Smaller head layouts, smallest first: for each (q, kv) with q % kv == 0, the first heads;
// for one q head, also each other q head with its kv head; for one kv head, also each other
// kv head with its group of q heads (so a failure seen only in a later head survives).
std::vector<HeadChoice> head_choices(const Layout& l) {
  std::vector<HeadChoice> choices;
  for (int q = 1; q <= l.q_heads; ++q) {
    for (int kv = 1; kv <= std::min(q, l.kv_heads); ++kv) {
      if (q % kv != 0 || (q == l.q_heads && kv == l.kv_heads)) continue;
      choices.push_back({range_of(0, q), range_of(0, kv)});
      if (q == 1 && kv == 1) {
        for (int h = 1; h < l.q_heads; ++h) choices.push_back({{h}, {l.kv_head_of(h)}});
      }
      if (kv == 1 && q == l.group() && l.kv_heads > 1) {
        for (int j = 1; j < l.kv_heads; ++j) {
          choices.push_back({range_of(j * l.group(), (j + 1) * l.group()), {j}});
        }
      }
    }
  }
  return choices;
}

Made reduce_heads(const Scenario& s, int index, Scenario& out) {
  const std::vector<HeadChoice> choices = head_choices(s.layout);
  if (static_cast<size_t>(index) >= choices.size()) return Made::end;
  const HeadChoice& choice = choices[static_cast<size_t>(index)];
  if (s.model) {
    // Without token data only the head counts matter: each once.
    for (int i = 0; i < index; ++i) {
      const HeadChoice& earlier = choices[static_cast<size_t>(i)];
      if (earlier.q.size() == choice.q.size() && earlier.kv.size() == choice.kv.size())
        return Made::skip;
    }
  }
  out = start_candidate(s);
  out.layout.q_heads = static_cast<int>(choice.q.size());
  out.layout.kv_heads = static_cast<int>(choice.kv.size());
  if (s.model) return Made::candidate;  // no token data: the weights follow the layout
  std::vector<ExplicitToken> tokens = materialise(s);
  for (ExplicitToken& t : tokens) {
    keep_only(t.q, choice.q);
    keep_only(t.k, choice.kv);
    keep_only(t.v, choice.kv);
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

// Smaller sets of n dims, smallest first: the first, the last, the first half, the second
// half, then all but one (each in turn). At model level, with no token data, only the
// number of dims matters: each size once.
std::vector<std::vector<int>> dim_choices(int n, bool sizes_only) {
  std::vector<std::vector<int>> choices;
  const auto add = [&](std::vector<int> keep) {
    if (keep.empty() || static_cast<int>(keep.size()) >= n) return;
    if (sizes_only && std::any_of(choices.begin(), choices.end(), [&](const std::vector<int>& c) {
          return c.size() == keep.size();
        })) {
      return;
    }
    if (std::find(choices.begin(), choices.end(), keep) == choices.end()) {
      choices.push_back(std::move(keep));
    }
  };
  add({0});
  add({n - 1});
  add(range_of(0, n / 2));
  add(range_of(n / 2, n));
  for (int drop = 0; drop < n; ++drop) {
    std::vector<int> keep = range_of(0, n);
    keep.erase(keep.begin() + drop);
    add(std::move(keep));
  }
  return choices;
}

Made reduce_head_dim(const Scenario& s, int index, Scenario& out) {
  const std::vector<std::vector<int>> choices = dim_choices(s.layout.head_dim, s.model.has_value());
  if (static_cast<size_t>(index) >= choices.size()) return Made::end;
  const std::vector<int>& keep = choices[static_cast<size_t>(index)];
  out = start_candidate(s);
  out.layout.head_dim = static_cast<int>(keep.size());
  if (keep.size() % 2 != 0) out.layout.rope_theta.reset();  // RoPE needs an even head_dim
  if (s.model) return Made::candidate;                      // no token data
  std::vector<ExplicitToken> tokens = materialise(s);
  for (ExplicitToken& t : tokens) {
    for (auto& head : t.q) keep_only(head, keep);
    for (auto& head : t.k) keep_only(head, keep);
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

Made reduce_value_dim(const Scenario& s, int index, Scenario& out) {
  const std::vector<std::vector<int>> choices =
      dim_choices(s.layout.value_dim, s.model.has_value());
  if (static_cast<size_t>(index) >= choices.size()) return Made::end;
  const std::vector<int>& keep = choices[static_cast<size_t>(index)];
  out = start_candidate(s);
  out.layout.value_dim = static_cast<int>(keep.size());
  if (s.model) return Made::candidate;  // no token data
  std::vector<ExplicitToken> tokens = materialise(s);
  for (ExplicitToken& t : tokens) {
    for (auto& head : t.v) keep_only(head, keep);
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

// RoPE off, window off, default scale, f32 storage.
Made simplify_layout(const Scenario& s, int index, Scenario& out) {
  if (index > 3) return Made::end;
  const Layout& l = s.layout;
  const bool applies[] = {l.rope_theta.has_value(), l.window.has_value(), l.scale.has_value(),
                          l.dtype != DType::f32};
  if (!applies[index]) return Made::skip;
  out = start_candidate(s);
  switch (index) {
    case 0:
      out.layout.rope_theta.reset();
      break;
    case 1:
      out.layout.window.reset();
      break;
    case 2:
      out.layout.scale.reset();
      break;
    default:
      out.layout.dtype = DType::f32;
      break;
  }
  return Made::candidate;
}

// ---------------------------------------------------------------------------------------
// Placement moves.

// Identity page order (or at least reversed), derived pool size, NaN poison.
Made simplify_placement(const Scenario& s, int index, Scenario& out) {
  if (index > 3) return Made::end;
  const Placement& p = s.placement;
  const bool applies[] = {p.order != PageOrder::identity, p.order == PageOrder::explicit_list,
                          p.pool_pages.has_value(), p.poison != Poison::nan};
  if (!applies[index]) return Made::skip;
  out = start_candidate(s);
  switch (index) {
    case 0:
    case 1:
      if (p.order == PageOrder::explicit_list && !out.placement.pool_pages) {
        out.placement.pool_pages = static_cast<int>(p.pages.size());  // the same pool
      }
      out.placement.order = index == 0 ? PageOrder::identity : PageOrder::reversed;
      out.placement.pages.clear();
      break;
    case 2:
      out.placement.pool_pages.reset();
      break;
    default:
      out.placement.poison = Poison::nan;
      break;
  }
  return Made::candidate;
}

// How simple a page size is for a program whose longest epoch has `context` tokens: one page
// per sequence is simplest (the default 16 first, then smaller), then smaller pages.
std::pair<int, int> page_key(int page_size, int context) {
  if (page_size >= context) return {0, page_size == 16 ? 0 : page_size};
  return {1, page_size};
}

Made reduce_page_size(const Scenario& s, int index, Scenario& out) {
  const int context = std::max(1, max_epoch_length(s));
  const int current = s.layout.page_size;
  std::vector<int> sizes;
  for (int size : {16, context, 1, current / 2, current - 1}) {
    if (size < 1 || size > limits::kMaxPageSize || size == current) continue;
    if (page_key(size, context) >= page_key(current, context)) continue;
    if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) sizes.push_back(size);
  }
  if (static_cast<size_t>(index) >= sizes.size()) return Made::end;
  out = start_candidate(s);
  out.layout.page_size = sizes[static_cast<size_t>(index)];
  return Made::candidate;
}

// ---------------------------------------------------------------------------------------
// Token data moves.

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
    const int used = order.empty() ? 1 : *std::max_element(order.begin(), order.end()) + 1;
    if (used >= generated->count) return Made::skip;
    out = start_candidate(s);
    std::get<GeneratedTokens>(out.tokens).count = used;
    return Made::candidate;
  }
  if (generated || order.empty()) return Made::skip;
  const auto& table = std::get<std::vector<ExplicitToken>>(s.tokens);
  bool identity = order.size() == table.size();
  for (size_t i = 0; identity && i < order.size(); ++i) identity = order[i] == static_cast<int>(i);
  if (identity) return Made::skip;
  std::vector<int> new_id(table.size(), -1);
  std::vector<ExplicitToken> tokens;
  for (int t : order) {
    new_id[static_cast<size_t>(t)] = static_cast<int>(tokens.size());
    tokens.push_back(table[static_cast<size_t>(t)]);
  }
  out = start_candidate(s);
  out.tokens = std::move(tokens);
  for (Op& op : out.program) {
    for (int& t : op.tokens) t = new_id[static_cast<size_t>(t)];
    for (Chunk& chunk : op.chunks) {
      for (int& t : chunk.tokens) t = new_id[static_cast<size_t>(t)];
    }
  }
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

template <typename Tokens, typename F>
void for_each_value(Tokens& tokens, bool q, bool k, bool v, F&& f) {
  for (auto& t : tokens) {
    for (auto* values : {q ? &t.q : nullptr, k ? &t.k : nullptr, v ? &t.v : nullptr}) {
      if (!values) continue;
      for (auto& head : *values) {
        for (auto& x : head) f(x);
      }
    }
  }
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

}  // namespace

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
    token.v = heads(table.v(t), l.kv_heads, l.value_dim);
  }
  return tokens;
}

Measure measure(const Scenario& s) {
  int chunks = 0, steps = 0, epoch_ops = 0;
  double keeps = 0;
  for (const Op& op : s.program) {
    chunks += static_cast<int>(op.batch().size());
    steps += op.kind == OpKind::step;
    epoch_ops += op.kind == OpKind::truncate || op.kind == OpKind::fork;
    if (op.kind == OpKind::truncate) keeps += static_cast<double>(op.keep);
  }
  const Layout& l = s.layout;
  const Placement& p = s.placement;
  const auto [page_class, page_rank] = page_key(l.page_size, std::max(1, max_epoch_length(s)));

  double nonzero = 0, fractions = 0, magnitude = 0, negative = 0;
  bool first_use = true;
  const bool generated = std::holds_alternative<GeneratedTokens>(s.tokens);
  if (!generated) {
    const auto& tokens = std::get<std::vector<ExplicitToken>>(s.tokens);
    for_each_value(tokens, true, true, true, [&](double x) {
      nonzero += x != 0;
      fractions += !is_integer(x);
      magnitude += std::fabs(x);
      negative += std::signbit(x);
    });
    const std::vector<int> order = first_use_order(s);
    first_use = order.size() == tokens.size();
    for (size_t i = 0; first_use && i < order.size(); ++i)
      first_use = order[i] == static_cast<int>(i);
  }
  // Model level: layers, widths, the vocabulary, the distinct words used, and whether they
  // are numbered in order of first use (all 0 without a model).
  double layers = 0, width = 0, ffn = 0, vocab = 0, words = 0, word_order = 0;
  if (s.model) {
    const std::vector<int> order = first_use_order(s);
    layers = s.model->layers;
    width = s.model->width;
    ffn = s.model->ffn;
    vocab = s.model->vocab;
    words = static_cast<double>(order.size());
    for (size_t i = 0; i < order.size(); ++i) word_order += order[i] != static_cast<int>(i);
    word_order = word_order > 0;
  }
  return {static_cast<double>(s.expect.size()),
          static_cast<double>(program_tokens(s)),
          static_cast<double>(s.program.size()),
          static_cast<double>(s.sequences),
          static_cast<double>(chunks),
          static_cast<double>(steps),
          static_cast<double>(epoch_ops),
          keeps,
          layers,
          width,
          ffn,
          vocab,
          words,
          word_order,
          static_cast<double>(l.q_heads),
          static_cast<double>(l.kv_heads),
          static_cast<double>(l.head_dim),
          static_cast<double>(l.value_dim),
          static_cast<double>(l.rope_theta.has_value()),
          static_cast<double>(l.window.has_value()),
          static_cast<double>(l.scale.has_value()),
          static_cast<double>(l.dtype != DType::f32),
          static_cast<double>(p.order == PageOrder::identity   ? 0
                              : p.order == PageOrder::reversed ? 1
                                                               : 2),
          static_cast<double>(p.pool_pages.has_value()),
          static_cast<double>(p.poison != Poison::nan),
          static_cast<double>(page_class),
          static_cast<double>(page_rank),
          static_cast<double>(generated),
          static_cast<double>(token_count(s.tokens)),
          static_cast<double>(!first_use),
          nonzero,
          fractions,
          magnitude,
          negative};
}

const std::vector<Move>& moves() {
  static const std::vector<Move> all = {
      {"drop expect rows", drop_expect},
      {"drop a sequence", drop_sequence},
      {"drop ops", drop_ops},
      {"drop a chunk", drop_chunk},
      {"drop tokens", drop_tokens},
      {"merge appends", merge_appends},
      {"step to append", step_to_append},
      {"truncate/fork to reset", simplify_epoch_ops},
      {"smaller model", reduce_model_size},
      {"smaller vocabulary", reduce_vocab},
      {"merge vocabulary ids", merge_vocab_ids},
      {"fewer heads", reduce_heads},
      {"smaller head_dim", reduce_head_dim},
      {"smaller value_dim", reduce_value_dim},
      {"simpler layout", simplify_layout},
      {"simpler placement", simplify_placement},
      {"page size", reduce_page_size},
      {"compact tokens", compact_tokens},
      {"merge token ids", merge_token_ids},
      {"values wholesale", simplify_values_wholesale},
      {"one value", simplify_value},
  };
  return all;
}

const std::vector<Move>& drop_moves() {
  static const std::vector<Move> drops = {
      {"drop ops", drop_ops},
      {"drop a chunk", drop_chunk},
      {"drop tokens", drop_tokens},
  };
  return drops;
}

Made split_chunk(const Scenario& s, int index, Scenario& out) {
  int seen = 0;
  for (const ChunkRef& r : chunk_refs(s)) {
    const int n = static_cast<int>(tokens_at(s, r).size());
    std::vector<int> points;
    for (int point : {n / 2, 1, n - 1}) {
      if (point >= 1 && point < n &&
          std::find(points.begin(), points.end(), point) == points.end()) {
        points.push_back(point);
      }
    }
    for (int point : points) {
      if (seen++ != index) continue;
      out = start_candidate(s);
      auto& tokens = tokens_at(out, r);
      const int seq = r.chunk < 0 ? s.program[r.op].seq
                                  : s.program[r.op].chunks[static_cast<size_t>(r.chunk)].seq;
      Op second = Op::append(seq, std::vector<int>(tokens.begin() + point, tokens.end()));
      tokens.resize(static_cast<size_t>(point));
      out.program.insert(out.program.begin() + static_cast<std::ptrdiff_t>(r.op) + 1,
                         std::move(second));
      return Made::candidate;
    }
  }
  return Made::end;
}

}  // namespace kvfuzz::shrinking
