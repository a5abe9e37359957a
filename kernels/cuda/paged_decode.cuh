// Paged decode: one query token per sequence over its paged K/V, split-K as flash-decoding
// does. Each block takes one (sequence, kv head, split): the q heads of the kv head's group
// together, over the split's keys, read through the block table. It writes each head's
// partial row, max and sum of exponentials; a second kernel merges the splits by
// log-sum-exp. The split count comes from the batch and the longest context
// (decode_splits), the way real kernels fill the machine, so a short row may get empty
// splits, which the merge weighs by exp(-inf) = 0.
#pragma once

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_compat.h"

namespace kvfuzz::cuda {

// Shapes and pointers of one launch. K/V pool: [page][slot][kv_head][head_dim] (values:
// value_dim), f32. Block tables: [seq][max_pages] int32; lengths[seq]: keys the decode
// row sees, its own included; window 0 for none.
struct DecodeArgs {
  const float* q = nullptr;  // [seq][q_head][head_dim], RoPE applied
  const float* k = nullptr;
  const float* v = nullptr;
  const int* block_tables = nullptr;
  const int* lengths = nullptr;
  int max_pages = 0, page_size = 0;
  int q_heads = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
  int window = 0;
  float scale = 1.0f;
  int splits = 1, keys_per_split = 0;
  float* partial_out = nullptr;  // [seq][q_head][split][value_dim]
  float* partial_max = nullptr;  // [seq][q_head][split]
  float* partial_sum = nullptr;  // [seq][q_head][split]
  float* out = nullptr;          // [seq][q_head][value_dim]
};

constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxGroup = 8;
constexpr int kDecodeMaxKeysPerSplit = 256;

// Splits for a batch: enough (sequence, kv head, split) blocks to fill `sms` twice over,
// at most ceil(longest / 32) (at least 32 keys a split) and at most 16, and keys per split
// a multiple of 32, at most kDecodeMaxKeysPerSplit.
inline void decode_splits(int batch, int kv_heads, int longest, int sms, int& splits,
                          int& keys_per_split) {
  const int work = batch * kv_heads;
  int want = (2 * sms + work - 1) / work;
  const int by_length = (longest + 31) / 32;
  want = want < by_length ? want : by_length;
  want = want < 16 ? want : 16;
  want = want > 1 ? want : 1;
  keys_per_split = ((longest + want - 1) / want + 31) / 32 * 32;
  if (keys_per_split > kDecodeMaxKeysPerSplit) keys_per_split = kDecodeMaxKeysPerSplit;
  splits = (longest + keys_per_split - 1) / keys_per_split;
  if (splits < 1) splits = 1;
}

// Blocks per kv head: its group's q heads, kDecodeMaxGroup at a time (MQA over 128 heads
// takes 16).
KVFUZZ_DEVICE int decode_group_blocks(int q_heads, int kv_heads) {
  const int group = q_heads / kv_heads;
  return (group + kDecodeMaxGroup - 1) / kDecodeMaxGroup;
}

// Grid (batch, kv_heads * decode_group_blocks, splits), kDecodeThreads threads.
KVFUZZ_GLOBAL void paged_decode_split(DecodeArgs a) {
  KVFUZZ_SHARED_ARRAY(float, scores, kDecodeMaxGroup* kDecodeMaxKeysPerSplit);
  KVFUZZ_SHARED_ARRAY(float, head_max, kDecodeMaxGroup);
  KVFUZZ_SHARED_ARRAY(float, head_sum, kDecodeMaxGroup);
  const int group_blocks = decode_group_blocks(a.q_heads, a.kv_heads);
  const int seq = static_cast<int>(blockIdx.x);
  const int kv = static_cast<int>(blockIdx.y) / group_blocks;
  const int split = static_cast<int>(blockIdx.z);
  const int t = static_cast<int>(threadIdx.x);
  // This block's q heads: first_head .. first_head + heads - 1.
  const int group_size = a.q_heads / a.kv_heads;
  const int first_in_group = static_cast<int>(blockIdx.y) % group_blocks * kDecodeMaxGroup;
  const int rest = group_size - first_in_group;
  const int group = rest < kDecodeMaxGroup ? rest : kDecodeMaxGroup;
  const int first_head = kv * group_size + first_in_group;
  const int length = a.lengths[seq];
  const int first_visible = a.window > 0 && length > a.window ? length - a.window : 0;
  int lo = split * a.keys_per_split, hi = lo + a.keys_per_split;
  lo = lo > first_visible ? lo : first_visible;
  hi = hi < length ? hi : length;
  const int n = hi > lo ? hi - lo : 0;  // may be 0: an empty split
  const int* table = a.block_tables + static_cast<long long>(seq) * a.max_pages;
  // Scores of every (q head of the group, key of the split), one key per thread at a time.
  for (int j = t; j < n; j += kDecodeThreads) {
    const int pos = lo + j;
    const long long slot =
        static_cast<long long>(table[pos / a.page_size]) * a.page_size + pos % a.page_size;
    const float* key = a.k + (slot * a.kv_heads + kv) * a.head_dim;
    for (int g = 0; g < group; ++g) {
      const float* q =
          a.q + (static_cast<long long>(seq) * a.q_heads + first_head + g) * a.head_dim;
      float s = 0.0f;
      for (int d = 0; d < a.head_dim; ++d) s += q[d] * key[d];
      scores[g * kDecodeMaxKeysPerSplit + j] = s * a.scale;
    }
  }
  __syncthreads();
  // Each head's max and sum of exponentials, one warp per head.
  const int warp = t / warpSize, lane = t % warpSize;
  for (int g = warp; g < group; g += kDecodeThreads / warpSize) {
    float m = -__builtin_inff();
    for (int j = lane; j < n; j += warpSize) {
      const float s = scores[g * kDecodeMaxKeysPerSplit + j];
      m = m > s ? m : s;
    }
    m = warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j < n; j += warpSize) {
      const float p = expf(scores[g * kDecodeMaxKeysPerSplit + j] - m);
      scores[g * kDecodeMaxKeysPerSplit + j] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      head_max[g] = m;
      head_sum[g] = sum;
    }
  }
  __syncthreads();
  // The partial rows: one (head, value dim) per thread at a time.
  for (int i = t; i < group * a.value_dim; i += kDecodeThreads) {
    const int g = i / a.value_dim, d = i % a.value_dim;
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) {
      const int pos = lo + j;
      const long long slot =
          static_cast<long long>(table[pos / a.page_size]) * a.page_size + pos % a.page_size;
      acc +=
          scores[g * kDecodeMaxKeysPerSplit + j] * a.v[(slot * a.kv_heads + kv) * a.value_dim + d];
    }
    const long long head = static_cast<long long>(seq) * a.q_heads + first_head + g;
    a.partial_out[(head * a.splits + split) * a.value_dim + d] = acc;
    if (d == 0) {
      a.partial_max[head * a.splits + split] = head_max[g];
      a.partial_sum[head * a.splits + split] = head_sum[g];
    }
  }
}

// Grid (batch, q_heads), one warp: out = sum_s e^(m_s - m) o_s / sum_s e^(m_s - m) l_s over
// the splits, m the largest split max; an empty split (max -inf) weighs 0.
KVFUZZ_GLOBAL void paged_decode_merge(DecodeArgs a) {
  const long long head = static_cast<long long>(blockIdx.x) * a.q_heads + blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x);
  float m = -__builtin_inff();
  for (int s = 0; s < a.splits; ++s) {
    const float x = a.partial_max[head * a.splits + s];
    m = m > x ? m : x;
  }
  float total = 0.0f;
  for (int s = 0; s < a.splits; ++s) {
    const float x = a.partial_max[head * a.splits + s];
    if (x != -__builtin_inff()) total += expf(x - m) * a.partial_sum[head * a.splits + s];
  }
  for (int d = lane; d < a.value_dim; d += warpSize) {
    float acc = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
      const float x = a.partial_max[head * a.splits + s];
      if (x != -__builtin_inff()) {
        acc += expf(x - m) * a.partial_out[(head * a.splits + s) * a.value_dim + d];
      }
    }
    a.out[head * a.value_dim + d] = acc / total;
  }
}

}  // namespace kvfuzz::cuda
