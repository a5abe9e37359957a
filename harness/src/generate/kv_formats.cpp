#include "generate/kv_formats.h"

#include <algorithm>
#include <array>
#include <variant>
#include <vector>

#include "generate/token_data.h"

namespace kvfuzz {

namespace {

// Powers of two, 1 last: exact in f32, and x / s is x * (1 / s).
std::vector<double> pick_scales(ChoiceSource& c, int kv_heads) {
  static constexpr std::array<double, 6> kScales{0.5, 2.0, 0.0625, 4.0, 0.25, 1.0};
  const bool per_head = c.pick_bool();
  std::vector<double> scales;
  for (int g = 0; g < kv_heads; ++g) scales.push_back(c.pick_from(kScales));
  if (!per_head) scales.resize(1);
  return scales;
}

constexpr std::array<KvQuant, 3> kAffine{KvQuant::affine4, KvQuant::affine8, KvQuant::affine2};

}  // namespace

void pick_affine_kv(ChoiceSource& c, const Bounds& b, Scenario& s) {
  const EngineSupports& can = b.supports;
  if (!can.kv_affine) return;
  Layout& l = s.layout;
  const std::vector<KvQuant>& want = b.filters.kv_formats;
  const bool by_chance = rarely(c, kAffineCaseOdds);
  const auto pick = static_cast<size_t>(c.pick(0, 15));
  const auto group_pick = static_cast<size_t>(c.pick(0, 15));
  // The groups that fit the bounds and the engine's multiple, smallest first.
  std::vector<int> groups;
  for (const int g : kAffineGroups) {
    if (g <= b.head_dim && g % std::max(1, can.head_dim_multiple) == 0) groups.push_back(g);
  }
  if (groups.empty()) return;
  if (want.empty() && (!by_chance || l.quantized_kv() || l.value_from_key)) {
    return;
  }
  // The filter's draw: one of its affine formats, or one of its others (left as drawn).
  if (!want.empty() && !is_affine(want[pick % want.size()])) return;
  const KvQuant quant = want.empty() ? kAffine[pick % kAffine.size()] : want[pick % want.size()];
  const Scenario before = s;
  l.value_from_key = false;  // a filter's: off (the others never get here with MLA)
  const Scenario wanted = s;
  // The drawn group, or a smaller one where the dims it needs would overflow the page pool
  // drawn for the old ones (a wide pool is sized to the limit); with a filter, then the pool
  // the program needs; none fits: no affine format.
  for (size_t i = group_pick % groups.size() + 1; i-- > 0;) {
    const int group = groups[i];
    s = wanted;
    l.k_format = KvFormat{quant, {}, group};
    l.v_format = KvFormat{quant, {}, group};
    if (l.head_dim % group != 0) {
      const bool same = l.value_dim == l.head_dim;
      l.head_dim = group;
      if (same || can.value_dim_is_head_dim) l.value_dim = group;
    }
    if (l.value_dim % group != 0) {
      l.value_dim = group;
      if (can.value_dim_is_head_dim) l.head_dim = group;
    }
    fit_explicit_tokens(l, before.layout.value_from_key, s);
    if (!validate(s)) return;
    if (!want.empty() && s.placement.pool_pages) {
      s.placement.pool_pages.reset();
      if (!validate(s)) return;
    }
  }
  s = before;
}

void pick_model_kv_formats(ChoiceSource& c, const Bounds& b, Scenario& s) {
  if (!b.model_kv_blocks && !b.model_kv_affine) return;
  static constexpr std::array<KvQuant, 5> kBlocks{KvQuant::q8_0, KvQuant::q4_0, KvQuant::q5_1,
                                                  KvQuant::q4_1, KvQuant::q5_0};
  const std::vector<KvQuant>& want = b.filters.kv_formats;
  const bool by_chance = rarely(c, kKvFormatCaseOdds);
  const auto k_pick = static_cast<size_t>(c.pick(0, 15));
  const auto v_pick = static_cast<size_t>(c.pick(0, 15));
  enum class VChoice { same, other, none };
  const VChoice v_choice =
      pick_weighted<VChoice>(c, {{VChoice::same, 6}, {VChoice::other, 1}, {VChoice::none, 1}});
  const auto group_pick = static_cast<size_t>(c.pick(0, 15));
  if (want.empty() && !by_chance) return;
  const auto multiple = std::max(1, b.supports.head_dim_multiple);
  // The declared formats (filter_conflict leaves only such, and no fp8, in a filter).
  std::vector<KvQuant> formats;
  if (b.model_kv_blocks) formats.assign(kBlocks.begin(), kBlocks.end());
  if (b.model_kv_affine) formats.insert(formats.end(), kAffine.begin(), kAffine.end());
  if (!want.empty()) formats = want;
  const KvQuant k = formats[k_pick % formats.size()];
  // A block format's rows of 32, or the affine group: within the bounds and the multiple.
  std::vector<int> rows;
  for (const int g : is_affine(k)
                         ? std::vector<int>(std::begin(kAffineGroups), std::end(kAffineGroups))
                         : std::vector<int>{kGgmlBlock}) {
    if (g <= b.max_head_dim && g % multiple == 0) rows.push_back(g);
  }
  if (rows.empty()) return;
  const int row = rows[group_pick % rows.size()];
  KvQuant v = k;
  if (is_ggml_block(k) && v_choice == VChoice::other) {
    v = formats[v_pick % formats.size()];
    if (!is_ggml_block(v)) v = k;
  }
  if (is_ggml_block(k) && v_choice == VChoice::none && want.empty()) v = KvQuant::none;
  if (b.supports.kv_one_format) v = k;
  const Scenario before = s;
  Layout& l = s.layout;
  l.k_format = KvFormat{k, {}, is_affine(k) ? row : 0};
  l.v_format = v == KvQuant::none ? KvFormat{} : KvFormat{v, {}, is_affine(v) ? row : 0};
  // The model's own scale, not a score spread's: at 2^8 and more times it, softmax picks
  // one key, and a key's block error decides which (validate.cpp says why).
  l.scale.reset();
  // The model's one head size (q, k and v share it where the engine says so).
  const bool same = l.value_dim == l.head_dim || b.supports.value_dim_is_head_dim;
  if (l.head_dim % row != 0) l.head_dim = row;
  if (same) l.value_dim = l.head_dim;
  if (v != KvQuant::none && l.value_dim % row != 0) l.value_dim = row;
  if (!validate(s)) return;
  if (!want.empty() && s.placement.pool_pages) {
    s.placement.pool_pages.reset();
    if (!validate(s)) return;
  }
  s = before;
}

void pick_kv_formats(ChoiceSource& c, const Bounds& b, Layout& l) {
  const EngineSupports& can = b.supports;
  if (!can.kv_fp8 && !can.kv_ggml_blocks) return;
  const std::vector<KvQuant>& want = b.filters.kv_formats;
  const bool quantized = rarely(c, kKvFormatCaseOdds) || !want.empty();
  // A block format's rows of 32 must fit the bounds and the engine's multiple.
  const bool rows_of_32 =
      b.head_dim >= kGgmlBlock && kGgmlBlock % std::max(1, can.head_dim_multiple) == 0;
  const auto allowed = [&](KvQuant q) {
    if (is_affine(q) || is_channel(q)) return false;  // drawn apart: pick_affine_kv, ...
    const bool supported = is_fp8(q) ? can.kv_fp8 : can.kv_ggml_blocks && rows_of_32;
    return supported && (want.empty() || std::find(want.begin(), want.end(), q) != want.end());
  };
  // K and V draw from the same formats (keys under RoPE too: the reference models what an
  // engine's rotation may do to a block, reference.cpp's store_rotated).
  std::vector<KvQuant> candidates;
  for (const KvQuant q : kQuantizedFormats) {
    if (allowed(q)) candidates.push_back(q);
  }
  const std::vector<KvQuant>& for_k = candidates;
  const std::vector<KvQuant>& for_v = candidates;
  const size_t k_pick = static_cast<size_t>(c.pick(0, 15));
  const size_t v_pick = static_cast<size_t>(c.pick(0, 15));
  // V: K's format (3 in 4 when it can), another format, or unquantized.
  enum class VChoice { same, other, none };
  const VChoice v_choice =
      pick_weighted<VChoice>(c, {{VChoice::same, 6}, {VChoice::other, 1}, {VChoice::none, 1}});
  std::vector<double> k_scales = pick_scales(c, l.kv_heads);
  std::vector<double> v_scales = pick_scales(c, l.kv_heads);
  if (!quantized || (for_k.empty() && for_v.empty())) return;

  KvQuant k = for_k.empty() ? KvQuant::none : for_k[k_pick % for_k.size()];
  KvQuant v = for_v.empty() ? KvQuant::none : for_v[v_pick % for_v.size()];
  if (v_choice == VChoice::same && allowed(k)) v = k;
  if (v_choice == VChoice::none && k != KvQuant::none && want.empty()) v = KvQuant::none;
  // Narrower engines (vLLM's kv_cache_dtype): V in K's format, or neither quantized; one
  // scale per tensor. Applied after every draw, so that other engines' scenarios stay as
  // they were.
  if (can.kv_one_format) v = k != KvQuant::none && allowed(k) ? k : (k = KvQuant::none);
  if (can.kv_tensor_scales) {
    k_scales.resize(1);
    v_scales.resize(1);
  }
  if (k != KvQuant::none) {
    l.k_format = KvFormat{k, is_fp8(k) ? std::move(k_scales) : std::vector<double>{}};
    if (is_ggml_block(k) && l.head_dim % kGgmlBlock != 0) {
      const bool same = l.value_dim == l.head_dim;
      l.head_dim = kGgmlBlock;
      if (same || can.value_dim_is_head_dim) l.value_dim = kGgmlBlock;
    }
  }
  if (v != KvQuant::none) {
    l.v_format = KvFormat{v, is_fp8(v) ? std::move(v_scales) : std::vector<double>{}};
    if (is_ggml_block(v) && l.value_dim % kGgmlBlock != 0) {
      l.value_dim = kGgmlBlock;
      if (can.value_dim_is_head_dim) l.head_dim = kGgmlBlock;
    }
  }
}

void pick_channel_kv(ChoiceSource& c, const Bounds& b, Scenario& s) {
  if (!b.supports.kv_channel || s.model) return;
  const std::vector<KvQuant>& want = b.filters.kv_formats;
  const bool by_chance = rarely(c, kChannelCaseOdds);
  const auto pick = static_cast<size_t>(c.pick(0, 15));
  const auto group_pick = static_cast<size_t>(c.pick(0, 15));
  Layout& l = s.layout;
  if (l.value_from_key) return;
  if (want.empty() && (!by_chance || l.k_format.quantized())) return;
  if (!want.empty() && !is_channel(want[pick % want.size()])) return;
  static constexpr std::array<KvQuant, 2> kChannel{KvQuant::channel_u8, KvQuant::channel_u4};
  static constexpr std::array<int, 4> kGroups{16, 32, 16, 64};  // small ones oftener
  const KvQuant quant = want.empty() ? kChannel[pick % kChannel.size()] : want[pick % want.size()];
  const KvFormat before = l.k_format;
  const int drawn = kGroups[group_pick % kGroups.size()];
  for (const int group : kChannelGroups) {
    if (group < drawn) continue;
    l.k_format = KvFormat{quant, {}, group};
    if (!validate(s)) return;
  }
  l.k_format = before;
}

}  // namespace kvfuzz
