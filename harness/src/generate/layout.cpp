// The layout of one scenario (layout.h): heads, RoPE, dims, page size, dtype, window and
// scale, one small picker each, drawn in that order.
#include "generate/layout.h"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "generate/features.h"
#include "generate/kv_formats.h"

namespace kvfuzz {

namespace {

// MHA (kv = q heads), then GQA (at least 2 kv heads; groups 2..8, powers of two or not,
// and beyond 8 when large and max_q_heads allows), then MQA (one kv head, q >= 2).
void pick_heads(ChoiceSource& c, const Bounds& b, Layout& l) {
  enum class Heads { mha, gqa, mqa };
  const Heads kind = pick_weighted<Heads>(c, {{Heads::mha, 3}, {Heads::gqa, 5}, {Heads::mqa, 2}});
  const int max_group = std::max(2, b.large ? b.max_q_heads / 2 : std::min(8, b.max_q_heads / 2));
  const int group = c.pick_int(2, max_group);
  const int gqa_kv =
      c.pick_int(2, std::clamp(b.q_heads / group, 2, std::max(2, b.max_q_heads / group)));
  const int mqa_q = c.pick_int(std::min(2, b.q_heads), b.q_heads);
  const int mha = c.pick_int(1, std::min(4, b.q_heads));
  if (kind == Heads::gqa && gqa_kv * group <= b.max_q_heads) {
    l.kv_heads = gqa_kv;
    l.q_heads = gqa_kv * group;
  } else if (kind == Heads::mqa && mqa_q >= 2) {
    l.kv_heads = 1;
    l.q_heads = mqa_q;
  } else {
    l.q_heads = l.kv_heads = mha;
  }
}

// A drawn on/off forced the way a filter wants it (the choice is drawn either way).
bool forced(bool drawn, OnOff filter) {
  return filter == OnOff::any ? drawn : filter == OnOff::on;
}

// Off first; when on, a base from common to fast-turning.
std::optional<double> pick_rope(ChoiceSource& c, int max_dim, OnOff filter) {
  static constexpr std::array<double, 4> kThetas{10000.0, 100.0, 1e6, 2.0};
  const bool on = forced(rarely(c, 3), filter);
  const double theta = c.pick_from(kThetas);
  if (!on || max_dim < 2) return std::nullopt;
  return theta;
}

// Tiny dims first, then multiples of the vector width (8), then any size up to the bound
// (mostly not multiples of 8). Even when RoPE needs it.
int pick_head_dim(ChoiceSource& c, int max_dim, bool even) {
  enum class Dim { tiny, aligned, any };
  const Dim kind = pick_weighted<Dim>(c, {{Dim::tiny, 4}, {Dim::aligned, 2}, {Dim::any, 3}});
  const int tiny = c.pick_int(1, std::min(4, max_dim));
  const int aligned = std::min(max_dim, 8 * c.pick_int(1, std::max(1, max_dim / 8)));
  const int any = c.pick_int(1, max_dim);
  int d = select(kind, {{Dim::tiny, tiny}, {Dim::aligned, aligned}, {Dim::any, any}});
  if (even && d % 2 == 1) d = d + 1 <= max_dim ? d + 1 : d - 1;
  return d;
}

// 16 first (a small program fits one page: no boundary at all), then the sizes where every
// chunk crosses pages (1, 2, 3), then others, powers of two or not.
int pick_page_size(ChoiceSource& c) {
  static constexpr std::array<int, 12> kPageSizes{16, 1, 2, 3, 4, 8, 5, 7, 6, 12, 32, 64};
  return c.pick_from(kPageSizes);
}

// Among the dtypes the engine supports (all three: f32 first, twice as often as each other).
DType pick_dtype(ChoiceSource& c, const std::vector<DType>& supported) {
  const auto weight = [&](DType dtype, int w) {
    return std::find(supported.begin(), supported.end(), dtype) != supported.end() ? w : 0;
  };
  if (supported.empty()) return DType::f32;  // check refuses an engine that supports none
  return pick_weighted<DType>(c, {{DType::f32, weight(DType::f32, 2)},
                                  {DType::f16, weight(DType::f16, 1)},
                                  {DType::bf16, weight(DType::bf16, 1)}});
}

// A drawn head (or value) dim moved onto the engine's multiple (and onto an even one when
// RoPE needs it), at most max_dim where a multiple fits below it.
int fit_dim(int d, int max_dim, int multiple, bool even) {
  const int step = even && multiple % 2 == 1 && multiple > 1 ? 2 * multiple : std::max(1, multiple);
  if (step == 1) return d;
  const int most = std::max(step, max_dim / step * step);
  return std::clamp((d + step - 1) / step * step, step, most);
}

// Off first. On: near a page size, the engine's tile or partition, its split threshold or
// a short chunk; on it, one above or one below.
std::optional<int> pick_window(ChoiceSource& c, int page_size, const EngineEdges& edges,
                               OnOff filter) {
  enum class Near { page, two_pages, tile, partition, split_threshold, short_chunk };
  static constexpr std::array kNear{Near::page,      Near::two_pages,       Near::tile,
                                    Near::partition, Near::split_threshold, Near::short_chunk};
  const bool on = forced(rarely(c, 3), filter);
  const Near near = c.pick_from(kNear);
  const int short_chunk = c.pick_int(1, 8);
  const int offset = pick_offset(c);
  const int base = select(near, {{Near::page, page_size},
                                 {Near::two_pages, 2 * page_size},
                                 {Near::tile, edges.tile_keys},
                                 {Near::partition, edges.partition_keys},
                                 {Near::split_threshold, edges.split_threshold},
                                 {Near::short_chunk, short_chunk}});
  if (!on) return std::nullopt;
  return std::max(1, base + offset);
}

// Absent (1/sqrt(head_dim)) first; sometimes a sharper or flatter softmax.
std::optional<double> pick_scale(ChoiceSource& c) {
  static constexpr std::array<double, 4> kScales{1.0, 0.5, 0.125, 2.0};
  const bool on = rarely(c, 6);
  const double scale = c.pick_from(kScales);
  if (!on) return std::nullopt;
  return scale;
}

}  // namespace

Layout pick_layout(ChoiceSource& c, const Bounds& b) {
  Layout l;
  pick_heads(c, b, l);
  // RoPE's interleaved pairs or part wanted (drawn last, pick_rope_style and pick_rope_dims)
  // need RoPE on from here: an even head_dim is drawn with it.
  const FeatureSet& want = b.filters.features;
  l.rope_theta = pick_rope(c, b.head_dim,
                           want.rope_interleaved || want.rope_dims ? OnOff::on : b.filters.rope);
  const int multiple = b.supports.head_dim_multiple;
  l.head_dim = fit_dim(pick_head_dim(c, b.head_dim, l.rope_theta.has_value()), b.head_dim, multiple,
                       l.rope_theta.has_value());
  // A part of the head RoPE leaves out needs a head of 4 or more where it is wanted (MLA's
  // RoPE part with it).
  const bool part_wanted = want.rope_dims || (want.value_from_key && b.supports.rope_dims);
  if (l.rope_theta && part_wanted && l.head_dim < 4 && b.head_dim >= 4) {
    l.head_dim = fit_dim(4, b.head_dim, multiple, true);
  }
  const bool same_value_dim = c.pick(0, 3) < 3 || b.supports.value_dim_is_head_dim;
  const int value_dim = fit_dim(pick_head_dim(c, b.head_dim, false), b.head_dim, multiple, false);
  l.value_dim = same_value_dim ? l.head_dim : value_dim;
  l.page_size = pick_page_size(c);
  l.dtype = pick_dtype(c, b.supports.dtypes);
  l.window = pick_window(c, l.page_size, b.edges, b.filters.window);
  if (b.long_context) {
    // A long context's window may be anything up to the context: its edge far from 0.
    const bool far = c.pick_bool();
    const int far_window = c.pick_int(1, b.epoch_tokens);
    if (l.window && far) l.window = far_window;
  }
  l.scale = pick_scale(c);
  pick_features(c, b, l);
  pick_kv_formats(c, b, l);
  return l;
}

}  // namespace kvfuzz
