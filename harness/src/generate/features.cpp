#include "generate/features.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <variant>
#include <vector>

#include "generate/token_data.h"

namespace kvfuzz {

namespace {

// Caps below the data's scores (tanh saturates), near them, and Gemma 2's 50 and 30.
double pick_softcap(ChoiceSource& c) {
  static constexpr std::array<double, 5> kCaps{4.0, 1.0, 50.0, 30.0, 0.5};
  return c.pick_from(kCaps);
}

// One sink logit per q head: 0 (ONNX Runtime's smooth softmax), ln 3 (the worked seed's),
// small, and large enough to outweigh every key or to vanish beside them.
std::vector<double> pick_sinks(ChoiceSource& c, int q_heads) {
  static constexpr std::array<double, 6> kSinks{0.0, 1.0986122886681098, -2.0, 4.0, 12.0, -30.0};
  std::vector<double> sinks;
  for (int h = 0; h < q_heads; ++h) sinks.push_back(c.pick_from(kSinks));
  return sinks;
}

// The standard schedule first; otherwise one slope per head from a few exact ones (0 and
// steep included, so that heads differ and a slope taken from the wrong head shows).
std::vector<double> pick_alibi(ChoiceSource& c, int q_heads) {
  static constexpr std::array<double, 5> kSlopes{0.5, 0.0, 1.0, 0.125, 0.00390625};
  const bool standard = c.pick(0, 2) < 2;
  std::vector<double> own;
  for (int h = 0; h < q_heads; ++h) own.push_back(c.pick_from(kSlopes));
  return standard ? standard_alibi_slopes(q_heads) : own;
}

// Near a page, the engine's tile, partition or split threshold, or a short chunk; on it,
// one above or one below.
int pick_chunk(ChoiceSource& c, int page_size, const EngineEdges& edges) {
  const std::array<int, 5> bases{page_size, edges.tile_keys, edges.partition_keys,
                                 edges.split_threshold, c.pick_int(1, 8)};
  const int base = c.pick_from(bases);
  return std::max(1, base + pick_offset(c));
}

}  // namespace

void pick_features(ChoiceSource& c, const Bounds& b, Layout& l) {
  const EngineSupports& can = b.supports;
  if (!can.softcap && !can.sinks && !can.alibi && !can.chunked_local) return;
  const FeatureSet& want = b.filters.features;
  const bool featured = rarely(c, kFeatureCaseOdds);
  const auto on = [&](bool supported, bool wanted) {
    const bool drawn = c.pick_bool();
    return supported && ((featured && drawn) || wanted);
  };
  const bool softcap = on(can.softcap, want.softcap);
  const double cap = pick_softcap(c);
  const bool sinks = on(can.sinks, want.sinks);
  std::vector<double> sink_logits = pick_sinks(c, l.q_heads);
  const bool alibi = on(can.alibi, want.alibi);
  std::vector<double> slopes = pick_alibi(c, l.q_heads);
  const bool chunked = on(can.chunked_local, want.chunked_local);
  const int chunk = pick_chunk(c, l.page_size, b.edges);
  if (softcap) l.softcap = cap;
  if (sinks) l.sinks = std::move(sink_logits);
  if (alibi) l.alibi = std::move(slopes);
  if (chunked) l.chunked_local = chunk;
}

namespace {

// MLA's layout, once drawn: the value from the key, `value_steps` of `multiple` long (or the
// whole head), with RoPE's part of `rope_pairs` pairs after it where there is room.
void make_latent(Layout& l, int multiple, int value_steps, int rope_pairs, bool one_size) {
  l.value_from_key = true;
  l.v_format = KvFormat{};  // the value has no cache of its own
  l.value_dim = one_size ? l.head_dim : value_steps * multiple;
  if (!l.rope_theta) return;
  const int dims = std::min(2 * rope_pairs, l.head_dim - 2);
  const int room = (l.head_dim - dims) / multiple * multiple;  // the value's, on the multiple
  if (room < 1) {
    l.clear_rope();
  } else {
    l.rope_dims = dims;
    l.value_dim = std::min(l.value_dim, room);
  }
}

}  // namespace

void pick_value_from_key(ChoiceSource& c, const Bounds& b, Scenario& s) {
  if (!b.supports.value_from_key) return;
  Layout& l = s.layout;
  const bool wanted = b.filters.features.value_from_key;
  const bool on = rarely(c, kValueFromKeyCaseOdds) || wanted;
  // The value is whole blocks of a block format's key row (validate.cpp); head_dim is a
  // multiple of both (pick_kv_formats), so of their lcm. fp8 and none: the engine's alone.
  const int multiple =
      std::lcm(std::max(1, b.supports.head_dim_multiple), row_multiple(l.k_format));
  const int steps = l.head_dim / multiple;
  const int value_steps = c.pick_int(1, std::max(1, steps - 1));
  // MLA's RoPE part, in pairs: drawn only for an engine that declares rope_dims (every other
  // engine's stream as before).
  const bool rope_part = b.supports.rope_dims;
  const int rope_pairs = rope_part ? c.pick_int(1, std::max(1, l.head_dim / 2 - 1)) : 0;
  if (!on) return;
  if (wanted && !rope_part) l.clear_rope();
  // A latent cache: unquantized, or in K's format, fp8 or a ggml block format here (affine
  // groups are drawn after this); the value is then read through its format and scale.
  const bool one_size = b.supports.value_dim_is_head_dim || steps < 2;
  // RoPE needs a part of the key the value does not read: a head of 4 or more, two sizes.
  if (l.rope_theta && (!rope_part || l.head_dim < 4)) {
    if (!wanted) return;
    l.clear_rope();
  }
  // DeepSeek's row over a block format is the latent's blocks, then the RoPE part's own
  // (512 + 64 under -ctk q8_0): a head of one block has room for only one of them, and is
  // widened to two where the bounds and the page pool (drawn for the narrower head) allow.
  if (l.rope_theta && one_size && row_multiple(l.k_format) > 1 &&
      !b.supports.value_dim_is_head_dim && 2 * multiple <= b.max_head_dim) {
    Scenario wide = s;
    wide.layout.head_dim = 2 * multiple;
    make_latent(wide.layout, multiple, 1, rope_pairs, false);
    fit_explicit_tokens(wide.layout, false, wide);
    if (!validate(wide)) {
      s = std::move(wide);
      return;
    }
  }
  if (l.rope_theta && one_size) {
    if (!wanted) return;
    l.clear_rope();
  }
  make_latent(l, multiple, value_steps, rope_pairs, one_size);
  fit_explicit_tokens(l, false, s);
}

bool pick_rope_style(ChoiceSource& c, const Bounds& b, Scenario& s) {
  if (!b.supports.rope_interleaved) return false;
  const bool on = rarely(c, kRopeInterleavedCaseOdds) || b.filters.features.rope_interleaved;
  if (!on || !s.layout.rope_theta) return false;
  s.layout.rope_style = RopeStyle::interleaved;
  return true;
}

bool pick_rope_dims(ChoiceSource& c, const Bounds& b, Scenario& s) {
  if (!b.supports.rope_dims) return false;
  Layout& l = s.layout;
  const bool on = rarely(c, kRopeDimsCaseOdds) || b.filters.features.rope_dims;
  const int pairs = c.pick_int(1, std::max(1, l.head_dim / 2 - 1));
  if (!on || !l.rope_theta || l.rope_dims || l.head_dim < 4) return false;
  l.rope_dims = std::min(2 * pairs, l.head_dim - 2);
  return true;
}

}  // namespace kvfuzz
