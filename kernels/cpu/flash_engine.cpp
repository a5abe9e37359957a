#include "cpu/flash_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvfuzz::cpu {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

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

void FlashEngine::online_pass(const Query& query, int kv_head, KeyRange keys, int64_t first_tile,
                              float& m, float& l, float* acc) {
  const PagedKvStore& store = kv();
  const size_t hd = static_cast<size_t>(layout().head_dim);
  const size_t vd = static_cast<size_t>(layout().value_dim);
  for (int64_t t = first_tile; t <= keys.hi; t += kFlashTileKeys) {
    const int64_t a = std::max(t, keys.lo);
    const int64_t b = std::min(t + kFlashTileKeys - 1, keys.hi);
    if (a > b) continue;
    const size_t n = static_cast<size_t>(b - a + 1);
    float tile_max = kMinusInf;
    for (size_t i = 0; i < n; ++i) {
      const int64_t j = a + static_cast<int64_t>(i);
      store.keys().read(store.k_offset(query.seq, j, kv_head), tile_k_.data() + i * hd, hd);
      store.values().read(store.v_offset(query.seq, j, kv_head), tile_v_.data() + i * vd, vd);
      tile_s_[i] = scale() * dot(query.q, tile_k_.data() + i * hd, hd);
      if (tile_s_[i] > tile_max) tile_max = tile_s_[i];
    }
    const float m_new = std::max(m, tile_max);
    const float rescale = std::exp(m - m_new);
    l *= rescale;
    for (size_t d = 0; d < vd; ++d) acc[d] *= rescale;
    const Arithmetic& arith = arithmetic();
    for (size_t i = 0; i < n; ++i) {
      const float p = std::exp(tile_s_[i] - m_new);
      l += p;
      const float w = arith.weight(p);
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
    m = m_new;
  }
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
    part_m_[p] = kMinusInf;
    part_l_[p] = 0;
    std::fill_n(part_acc_.data() + p * vd, vd, 0.0f);
    online_pass(query, kv_head, part, part.lo, part_m_[p], part_l_[p], part_acc_.data() + p * vd);
  }
  merge_partitions(np, keys, size, out);
}

void FlashEngine::merge_partitions(size_t parts, KeyRange /*keys*/, int64_t /*size*/, float* out) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
  // Log-sum-exp merge: every partition rescaled to the global max. An empty partition (max
  // -inf, sum 0) gets weight exp(-inf - m) = 0; partition 0 always holds the row's first key.
  const auto np = static_cast<std::ptrdiff_t>(parts);
  const float m = *std::max_element(part_m_.begin(), part_m_.begin() + np);
  float l = 0;
  std::fill_n(out, vd, 0.0f);
  for (size_t p = 0; p < parts; ++p) {
    const float w = std::exp(part_m_[p] - m);
    l += part_l_[p] * w;
    for (size_t d = 0; d < vd; ++d) out[d] += part_acc_[p * vd + d] * w;
  }
  for (size_t d = 0; d < vd; ++d) out[d] /= l;
}

void FlashEngine::attend(const Query& query, int kv_head, KeyRange keys, float* out) {
  const size_t vd = static_cast<size_t>(layout().value_dim);
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
    split_decode(query, kv_head, keys, size, parts, out);
    return;
  }
  int64_t first_tile = keys.lo;  // decode: tiles start at the first visible key
  if (query.chunk_tokens == 1) {
    ++counts_.decode;
  } else {
    ++counts_.prefill;
    first_tile = keys.lo - keys.lo % kFlashTileKeys;  // prefill: tiles aligned in position
  }
  float m = kMinusInf;
  float l = 0;
  std::fill_n(out, vd, 0.0f);
  online_pass(query, kv_head, keys, first_tile, m, l, out);
  for (size_t d = 0; d < vd; ++d) out[d] /= l;
}

}  // namespace kvfuzz::cpu
