#include "cpu/flash_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvfuzz::cpu {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// The largest of n scores, -inf for none (a NaN never wins).
float max_of(const std::vector<float>& scores, size_t n) {
  float max = kMinusInf;
  for (size_t i = 0; i < n; ++i) {
    if (scores[i] > max) max = scores[i];
  }
  return max;
}

}  // namespace

FlashEngine::FlashEngine(const EngineConfig& config, FlashSplit split)
    : PagedStorageEngine(config),
      tile_k_(static_cast<size_t>(kFlashTileKeys) * static_cast<size_t>(layout().head_dim)),
      tile_v_(static_cast<size_t>(kFlashTileKeys) * static_cast<size_t>(layout().value_dim)),
      tile_s_(static_cast<size_t>(kFlashTileKeys)),
      tile_run_(static_cast<size_t>(layout().value_dim), 0.0f),
      split_(split) {
  split_.fixed_parts = std::max(1, split_.fixed_parts);
}

// Every chunk of a step is begun before any is attended: the step's longest decode context
// (the keys its one-token chunks will see, cut by the window) is known before the first row.
void FlashEngine::begin_chunk(int seq, int tokens) {
  PagedStorageEngine::begin_chunk(seq, tokens);
  if (step_longest_at_ != step_count()) {
    step_longest_at_ = step_count();
    step_longest_ = 0;
  }
  if (tokens != 1) return;
  int64_t context = next_position(seq) + 1;
  if (layout().window) context = std::min<int64_t>(context, *layout().window);
  step_longest_ = std::max(step_longest_, context);
}

size_t FlashEngine::load_tile(const Query& query, int kv_head, int64_t a, int64_t b) {
  const PagedKvStore& store = kv();
  const size_t hd = static_cast<size_t>(layout().head_dim);
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const size_t n = static_cast<size_t>(b - a + 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = a + static_cast<int64_t>(i);
    store.keys().read(store.k_offset(query.seq, j, kv_head), tile_k_.data() + i * hd, hd);
    store.values().read(store.v_offset(query.seq, j, kv_head), tile_v_.data() + i * vd, vd);
    const float score = scale() * dot(query.q, tile_k_.data() + i * hd, hd);
    tile_s_[i] = on_split_ ? split_logit(features_, score, j) : features_.logit(score, j);
  }
  return n;
}

void FlashEngine::accumulate_tile(size_t n, const float* weights, float* acc) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const Arithmetic& arith = arithmetic();
  for (size_t i = 0; i < n; ++i) {
    const float w = weights[i];
    if (!arith.f16_values) {
      for (size_t d = 0; d < vd; ++d) acc[d] += w * tile_v_[i * vd + d];
      continue;
    }
    for (size_t d = 0; d < vd; ++d) {
      const float term = round_to_dtype(w * tile_v_[i * vd + d], DType::f16);
      tile_run_[d] = round_to_dtype(tile_run_[d] + term, DType::f16);
    }
    if ((i + 1) % kF16RunKeys != 0 && i + 1 != n) continue;
    for (size_t d = 0; d < vd; ++d) {  // the f16 run into the f32 accumulator
      acc[d] += tile_run_[d];
      tile_run_[d] = 0;
    }
  }
}

void FlashEngine::online_pass(const Query& query, int kv_head, KeyRange keys, int64_t first_tile,
                              float& m, float& l, float* acc) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const Arithmetic& arith = arithmetic();
  if (arith.normalised_p) return normalised_pass(query, kv_head, keys, first_tile, m, l, acc);
  for (int64_t t = first_tile; t <= keys.hi; t += kFlashTileKeys) {
    const int64_t a = std::max(t, keys.lo);
    const int64_t b = std::min(t + kFlashTileKeys - 1, keys.hi);
    if (a > b) continue;
    const size_t n = load_tile(query, kv_head, a, b);
    const float m_new = std::max(m, max_of(tile_s_, n));
    const float rescale = std::exp(m - m_new);
    l *= rescale;
    for (size_t d = 0; d < vd; ++d) acc[d] *= rescale;
    for (size_t i = 0; i < n; ++i) {
      const float p = std::exp(tile_s_[i] - m_new);
      l += p;
      tile_s_[i] = arith.weight(p);
    }
    accumulate_tile(n, tile_s_.data(), acc);
    m = m_new;
  }
}

// As vLLM's paged attention: the max and the sum of the exponentials first (here tile by
// tile, rescaled as the max grows), then P = exp(s - m) / (l + eps) rounded, times V.
void FlashEngine::normalised_pass(const Query& query, int kv_head, KeyRange keys,
                                  int64_t first_tile, float& m, float& l, float* acc) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const auto tiles = [&](auto&& visit) {
    for (int64_t t = first_tile; t <= keys.hi; t += kFlashTileKeys) {
      const int64_t a = std::max(t, keys.lo);
      const int64_t b = std::min(t + kFlashTileKeys - 1, keys.hi);
      if (a <= b) visit(load_tile(query, kv_head, a, b));
    }
  };
  tiles([&](size_t n) {
    const float m_new = std::max(m, max_of(tile_s_, n));
    l *= std::exp(m - m_new);
    for (size_t i = 0; i < n; ++i) l += std::exp(tile_s_[i] - m_new);
    m = m_new;
  });
  const float inv = 1.0f / (l + kNormaliserEpsilon);
  tiles([&](size_t n) {
    for (size_t i = 0; i < n; ++i) tile_s_[i] = arithmetic().weight(std::exp(tile_s_[i] - m) * inv);
    accumulate_tile(n, tile_s_.data(), acc);
  });
  // The caller divides by l: the accumulator is handed back unnormalised.
  for (size_t d = 0; d < vd; ++d) acc[d] *= l;
}

void FlashEngine::split_decode(const Query& query, int kv_head, KeyRange keys, int64_t size,
                               int64_t parts, float* out) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const size_t np = static_cast<size_t>(parts);
  if (part_m_.size() < np) {
    part_m_.resize(np);
    part_l_.resize(np);
    part_acc_.resize(np * vd);
  }
  for (size_t p = 0; p < np; ++p) {
    const int64_t lo = keys.lo + static_cast<int64_t>(p) * size;
    const KeyRange part{lo, std::min(lo + size - 1, keys.hi)};
    if (part.count() == 0) ++empty_partitions_;
    // The sink joins partition 0 (which always holds the row's first key) as a key whose
    // value is 0: its running max starts at the sink's logit, its sum at exp(0) = 1.
    const bool sink = p == 0 && features_.sink.has_value();
    part_m_[p] = sink ? *features_.sink : kMinusInf;
    part_l_[p] = sink ? 1.0f : 0.0f;
    std::fill_n(part_acc_.data() + p * vd, vd, 0.0f);
    online_pass(query, kv_head, part, part.lo, part_m_[p], part_l_[p], part_acc_.data() + p * vd);
  }
  merge_partitions(np, keys, size, out);
}

void FlashEngine::merge_partitions(size_t parts, KeyRange /*keys*/, int64_t /*size*/, float* out) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const Arithmetic& arith = arithmetic();
  // A partition as the combine reads it: stored in the partials' dtype.
  const auto stored = [&](float x) { return round_to_dtype(x, arith.partials); };
  const auto np = static_cast<std::ptrdiff_t>(parts);
  std::fill_n(out, vd, 0.0f);
  if (arith.lse_combine) return lse_combine(parts, out);
  // Log-sum-exp merge: every partition rescaled to the global max. An empty partition (max
  // -inf, sum 0) gets weight exp(-inf - m) = 0; partition 0 always holds the row's first key.
  const float m = *std::max_element(part_m_.begin(), part_m_.begin() + np);
  float l = 0;
  for (size_t p = 0; p < parts; ++p) {
    const float w = std::exp(part_m_[p] - m);
    l += stored(part_l_[p]) * w;
    for (size_t d = 0; d < vd; ++d) out[d] += stored(part_acc_[p * vd + d]) * w;
  }
  for (size_t d = 0; d < vd; ++d) out[d] /= l;
}

// FlashAttention-2's combine_attn_seqk_parallel: each partition normalised (acc times the
// reciprocal of its sum) and stored in the partials' dtype, lse_s = m_s + log(l_s) (-inf
// when empty); then lse = log(sum_s exp(lse_s - max)) + max and out = sum_s exp(lse_s -
// lse) O_s, in partition order.
void FlashEngine::lse_combine(size_t parts, float* out) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const DType partials = arithmetic().partials;
  if (part_lse_.size() < parts) part_lse_.resize(parts);
  for (size_t p = 0; p < parts; ++p) {
    const float l = part_l_[p];
    part_lse_[p] = l == 0 ? kMinusInf : part_m_[p] + std::log(l);
    const float inv = l == 0 ? 1.0f : 1.0f / l;
    for (size_t d = 0; d < vd; ++d) {
      part_acc_[p * vd + d] = round_to_dtype(part_acc_[p * vd + d] * inv, partials);
    }
  }
  float lse_max =
      *std::max_element(part_lse_.begin(), part_lse_.begin() + static_cast<std::ptrdiff_t>(parts));
  if (lse_max == kMinusInf) lse_max = 0;
  float lse_sum = 0;
  for (size_t p = 0; p < parts; ++p) lse_sum += std::exp(part_lse_[p] - lse_max);
  const float lse = std::log(lse_sum) + lse_max;
  for (size_t p = 0; p < parts; ++p) {
    const float scale = std::exp(part_lse_[p] - lse);
    for (size_t d = 0; d < vd; ++d) out[d] += scale * part_acc_[p * vd + d];
  }
}

void FlashEngine::attend(const Query& query, int kv_head, KeyRange keys, float* out) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  features_ = logit_features(query);
  // The context that fixes the partitions: the row's own, or the step's longest decode's.
  const int64_t span = split_.count == SplitCount::own_context ? keys.count() : step_longest_;
  if (query.chunk_tokens == 1 && span >= kFlashSplitThreshold) {
    ++counts_.split_decode;
    int64_t size = kFlashPartitionKeys;
    int64_t parts = (span + size - 1) / size;
    if (split_.count == SplitCount::fixed) {
      parts = split_.fixed_parts;
      const int64_t even = (span + parts - 1) / parts;
      size = (even + kFlashTileKeys - 1) / kFlashTileKeys * kFlashTileKeys;
    }
    on_split_ = true;
    split_decode(query, kv_head, keys, size, parts, out);
    on_split_ = false;
    return;
  }
  int64_t first_tile = keys.lo;  // decode: tiles start at the first visible key
  if (query.chunk_tokens == 1) {
    ++counts_.decode;
  } else {
    ++counts_.prefill;
    first_tile = keys.lo - keys.lo % kFlashTileKeys;  // prefill: tiles aligned in position
  }
  // A sink starts the row as a key whose value is 0 (see split_decode).
  float m = features_.sink.value_or(kMinusInf);
  float l = features_.sink ? 1.0f : 0.0f;
  std::fill_n(out, vd, 0.0f);
  online_pass(query, kv_head, keys, first_tile, m, l, out);
  for (size_t d = 0; d < vd; ++d) out[d] /= l;
}

}  // namespace kvfuzz::cpu
