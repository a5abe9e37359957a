// Moves on the layout and the placement (shrink/moves.h): fewer heads, smaller head_dim and
// value_dim, RoPE, window and scale off, f32 storage; simpler page order, pool and poison,
// a simpler page size. Token data is rewritten to the new shapes (materialised first when
// it was generated), keeping the chosen heads and dims.
#include <algorithm>
#include <utility>
#include <vector>

#include "kvfuzz/limits.h"
#include "shrink/measure.h"
#include "shrink/moves.h"
#include "shrink/token_data.h"

namespace kvfuzz::shrinking {

namespace {

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

}  // namespace

// Fewer heads: each head_choices() layout, with the token data of the heads it keeps.
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
  for (std::vector<double>* per_head : {&out.layout.sinks, &out.layout.alibi}) {
    if (per_head->empty()) continue;
    std::vector<double> kept;
    for (int h : choice.q) kept.push_back((*per_head)[static_cast<size_t>(h)]);
    *per_head = std::move(kept);
  }
  // Per-kv-head fp8 scales follow the kv heads kept.
  for (KvFormat* format : {&out.layout.k_format, &out.layout.v_format}) {
    if (format->scale.size() <= 1) continue;
    std::vector<double> kept;
    for (int g : choice.kv) kept.push_back(format->scale[static_cast<size_t>(g)]);
    format->scale = std::move(kept);
  }
  if (s.model) return Made::candidate;  // no token data: the weights follow the layout
  std::vector<ExplicitToken> tokens = materialise(s);
  for (ExplicitToken& t : tokens) {
    keep_only(t.q, choice.q);
    keep_only(t.k, choice.kv);
    if (!t.v.empty()) keep_only(t.v, choice.kv);  // none under value_from_key
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

// RoPE's part (Layout::rope_dims) follows the dims kept of q and k: as many of them as were
// in it; the whole head again when every kept dim was, RoPE off when an odd number were (as
// for an odd head_dim).
namespace {
void keep_rope_part(const Layout& before, const std::vector<int>& keep, Layout& after) {
  if (!before.rope_dims || !after.rope_theta) return;
  const int first = before.head_dim - *before.rope_dims;
  const auto turned =
      static_cast<int>(std::count_if(keep.begin(), keep.end(), [&](int d) { return d >= first; }));
  if (turned % 2 != 0) {
    after.clear_rope();
  } else if (turned == 0 || turned == after.head_dim) {
    after.rope_dims.reset();  // none left (RoPE over the whole head is the nearest) or all
  } else {
    after.rope_dims = turned;
  }
}
}  // namespace

// A smaller head_dim: each dim_choices() set, in q and k alike.
Made reduce_head_dim(const Scenario& s, int index, Scenario& out) {
  const std::vector<std::vector<int>> choices = dim_choices(s.layout.head_dim, s.model.has_value());
  if (static_cast<size_t>(index) >= choices.size()) return Made::end;
  const std::vector<int>& keep = choices[static_cast<size_t>(index)];
  out = start_candidate(s);
  out.layout.head_dim = static_cast<int>(keep.size());
  if (keep.size() % 2 != 0) out.layout.clear_rope();  // RoPE needs an even head_dim
  keep_rope_part(s.layout, keep, out.layout);
  if (s.model) return Made::candidate;  // no token data
  std::vector<ExplicitToken> tokens = materialise(s);
  for (ExplicitToken& t : tokens) {
    for (auto& head : t.q) keep_only(head, keep);
    for (auto& head : t.k) keep_only(head, keep);
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

// A smaller value_dim: each dim_choices() set, in v.
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

// One head size for q, k and v (value_dim == head_dim) cut as one: each dim_choices() set
// in q, k and v alike. An engine that takes one head size (ONNX Runtime's kernels,
// llama.cpp) rejects every head_dim or value_dim cut alone.
Made reduce_head_size(const Scenario& s, int index, Scenario& out) {
  if (s.layout.value_dim != s.layout.head_dim) return Made::end;
  const std::vector<std::vector<int>> choices = dim_choices(s.layout.head_dim, s.model.has_value());
  if (static_cast<size_t>(index) >= choices.size()) return Made::end;
  const std::vector<int>& keep = choices[static_cast<size_t>(index)];
  out = start_candidate(s);
  out.layout.head_dim = static_cast<int>(keep.size());
  out.layout.value_dim = out.layout.head_dim;
  if (keep.size() % 2 != 0) out.layout.clear_rope();  // RoPE needs an even head_dim
  keep_rope_part(s.layout, keep, out.layout);
  if (s.model) return Made::candidate;  // no token data
  std::vector<ExplicitToken> tokens = materialise(s);
  for (ExplicitToken& t : tokens) {
    for (auto* heads : {&t.q, &t.k, &t.v}) {
      for (auto& head : *heads) keep_only(head, keep);
    }
  }
  out.tokens = std::move(tokens);
  return Made::candidate;
}

// RoPE off, window off, default scale, f32 storage, RoPE's pairs half-split, RoPE over the
// whole head (with MLA's value in the key that is not a valid scenario: RoPE off is the move
// that removes both).
Made simplify_layout(const Scenario& s, int index, Scenario& out) {
  if (index > 5) return Made::end;
  const Layout& l = s.layout;
  const bool applies[] = {l.rope_theta.has_value(),
                          l.window.has_value(),
                          l.scale.has_value(),
                          l.dtype != DType::f32,
                          l.rope_style != RopeStyle::half_split,
                          l.rope_dims.has_value()};
  if (!applies[index]) return Made::skip;
  out = start_candidate(s);
  switch (index) {
    case 0:
      out.layout.clear_rope();
      break;
    case 1:
      out.layout.window.reset();
      break;
    case 2:
      out.layout.scale.reset();
      break;
    case 3:
      out.layout.dtype = DType::f32;
      break;
    case 4:
      out.layout.rope_style = RopeStyle::half_split;
      break;
    default:
      out.layout.rope_dims.reset();
      break;
  }
  return Made::candidate;
}

// The attention features and the quantized KV formats: each one off (soft cap, sinks,
// ALiBi, chunked local, K's format, V's format), an fp8 format's scales to 1, MLA's value
// read from its key off, affine groups to 32, then one q head's sink logit or ALiBi slope at
// a time set to 0.
Made simplify_features(const Scenario& s, int index, Scenario& out) {
  const Layout& l = s.layout;
  const auto heads = static_cast<int>(l.q_heads);
  constexpr int kSwitches = 10;
  if (index >= kSwitches + 2 * heads) return Made::end;
  if (index < kSwitches) {
    const auto scaled = [](const KvFormat& f) {
      return !f.scale.empty() && (f.scale.size() > 1 || f.scale[0] != 1.0);
    };
    constexpr int kSmallestGroup = kAffineGroups[0];
    const bool wide_groups = l.k_format.group > kSmallestGroup || l.v_format.group > kSmallestGroup;
    const bool applies[kSwitches] = {l.softcap.has_value(),  !l.sinks.empty(),
                                     !l.alibi.empty(),       l.chunked_local.has_value(),
                                     l.k_format.quantized(), l.v_format.quantized(),
                                     scaled(l.k_format),     scaled(l.v_format),
                                     l.value_from_key,       wide_groups};
    if (!applies[index]) return Made::skip;
    out = start_candidate(s);
    Layout& o = out.layout;
    switch (index) {
      case 0:
        o.softcap.reset();
        break;
      case 1:
        o.sinks.clear();
        break;
      case 2:
        o.alibi.clear();
        break;
      case 3:
        o.chunked_local.reset();
        break;
      case 4:
        o.k_format = KvFormat{};
        break;
      case 5:
        o.v_format = KvFormat{};
        break;
      case 6:
        o.k_format.scale.clear();
        break;
      case 7:
        o.v_format.scale.clear();
        break;
      case 9:
        for (KvFormat* f : {&o.k_format, &o.v_format}) {
          if (is_affine(f->quant)) f->group = kSmallestGroup;
        }
        break;
      default:
        // Values of their own: explicit tokens get the ones they read (their keys' prefixes).
        o.value_from_key = false;
        if (auto* list = std::get_if<std::vector<ExplicitToken>>(&out.tokens)) {
          for (ExplicitToken& t : *list) {
            t.v = t.k;
            for (auto& head : t.v) head.resize(static_cast<size_t>(l.value_dim));
          }
        }
        break;
    }
    return Made::candidate;
  }
  const bool sink = index < kSwitches + heads;
  const std::vector<double>& values = sink ? l.sinks : l.alibi;
  const auto h = static_cast<size_t>(sink ? index - kSwitches : index - kSwitches - heads);
  if (h >= values.size() || values[h] == 0) return Made::skip;
  out = start_candidate(s);
  (sink ? out.layout.sinks : out.layout.alibi)[h] = 0;
  return Made::candidate;
}

// Identity page order (or at least reversed), derived pool size, NaN poison, thread order
// (a failure that needs another thread order keeps it: the candidate passes).
Made simplify_placement(const Scenario& s, int index, Scenario& out) {
  if (index > 4) return Made::end;
  const Placement& p = s.placement;
  const bool applies[] = {p.order != PageOrder::identity, p.order == PageOrder::explicit_list,
                          p.pool_pages.has_value(), p.poison != Poison::nan,
                          p.threads != ThreadSchedule{}};
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
    case 3:
      out.placement.poison = Poison::nan;
      break;
    default:
      out.placement.threads = {};
      break;
  }
  return Made::candidate;
}

// A page size simpler in the measure's page_key: 16, one page for the longest epoch, 1,
// half, one less.
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

}  // namespace kvfuzz::shrinking
