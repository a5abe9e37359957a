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
#include "cuda/logit_features.cuh"
#include "cuda/paged_kv.cuh"

namespace kvfuzz::cuda {

// Shapes and pointers of one launch: batch row b decodes one token of sequence
// batch_seq[b], whose K/V (its own key included) are already in the cache.
struct DecodeArgs {
  PagedKv kv;
  const int* batch_seq = nullptr;  // [batch]: the sequence whose block table row b reads
  const float* q = nullptr;        // [batch][q_head][head_dim], RoPE applied
  const int* lengths = nullptr;    // [batch]: keys row b sees before the window, its own included
  int q_heads = 0;
  int window = 0;  // 0: none
  float scale = 1.0f;
  LogitFeatures features;  // the soft cap and ALiBi per score, chunked local; the sink at the merge
  int splits = 1, keys_per_split = 0;
  int p_dtype = kNoRounding;     // P rounded to it before P.V (the sum takes P unrounded)
  int out_dtype = kNoRounding;   // rows rounded to it
  int faults = 0;                // KernelFault bits: 0 for honest engines
  float* partial_out = nullptr;  // [batch][q_head][split][value_dim]
  float* partial_max = nullptr;  // [batch][q_head][split]
  float* partial_sum = nullptr;  // [batch][q_head][split]
  float* out = nullptr;          // [batch][q_head][value_dim]
};

constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxGroup = 8;
constexpr int kDecodeMaxKeysPerSplit = 256;
// Splits the merge weighs in shared memory: an epoch's 16384 tokens take at most 64.
constexpr int kDecodeMaxSplits = 64;

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
KVFUZZ_HOST_DEVICE int decode_group_blocks(int q_heads, int kv_heads) {
  const int group = q_heads / kv_heads;
  return (group + kDecodeMaxGroup - 1) / kDecodeMaxGroup;
}

// The launch shapes: paged_decode_split takes (batch, kv_heads * decode_group_blocks,
// splits) blocks of kDecodeThreads threads, paged_decode_merge (batch, q_heads) of one warp.
inline dim3 decode_split_grid(int batch, int q_heads, int kv_heads, int splits) {
  return dim3(static_cast<unsigned>(batch),
              static_cast<unsigned>(kv_heads * decode_group_blocks(q_heads, kv_heads)),
              static_cast<unsigned>(splits));
}
inline dim3 decode_merge_grid(int batch, int q_heads) {
  return dim3(static_cast<unsigned>(batch), static_cast<unsigned>(q_heads));
}
constexpr int kDecodeMergeThreads = 32;

// The physical slot of position `pos` through the split's page ids, staged in shared
// memory from page `first_page` of the sequence's block table on.
KVFUZZ_DEVICE long long staged_slot(KVFUZZ_SHARED_PTR(int) pages, int first_page, int page_size,
                                    int pos) {
  const int page = pages[pos / page_size - first_page];
  return static_cast<long long>(page) * page_size + pos % page_size;
}

// Grid decode_split_grid, kDecodeThreads threads.
KVFUZZ_GLOBAL void paged_decode_split(DecodeArgs a) {
  KVFUZZ_SHARED_ARRAY(float, scores, kDecodeMaxGroup* kDecodeMaxKeysPerSplit);
  KVFUZZ_SHARED_ARRAY(float, head_max, kDecodeMaxGroup);
  KVFUZZ_SHARED_ARRAY(float, head_sum, kDecodeMaxGroup);
  KVFUZZ_SHARED_ARRAY(int, split_pages, kDecodeMaxKeysPerSplit + 1);
  const PagedKv& kv = a.kv;
  const int group_blocks = decode_group_blocks(a.q_heads, kv.kv_heads);
  const int row = static_cast<int>(blockIdx.x);
  const int seq = a.batch_seq[row];
  const int kv_head = static_cast<int>(blockIdx.y) / group_blocks;
  const int split = static_cast<int>(blockIdx.z);
  const int t = static_cast<int>(threadIdx.x);
  // This block's q heads: first_head .. first_head + group - 1.
  const int group_size = a.q_heads / kv.kv_heads;
  const int first_in_group = static_cast<int>(blockIdx.y) % group_blocks * kDecodeMaxGroup;
  const int rest = group_size - first_in_group;
  const int group = rest < kDecodeMaxGroup ? rest : kDecodeMaxGroup;
  const int first_head = kv_head * group_size + first_in_group;
  const int length = a.lengths[row];
  const int first_visible = first_visible_key(length - 1, a.window, a.features.chunked_local);
  int lo = split * a.keys_per_split, hi = lo + a.keys_per_split;
  lo = lo > first_visible ? lo : first_visible;
  const int end = a.faults & kFaultSplitBoundPastLength ? length + 1 : length;
  hi = hi < end ? hi : end;
  const int n = hi > lo ? hi - lo : 0;  // may be 0: an empty split
  if (n == 0 && (a.faults & kFaultEmptySplitUnwritten)) return;
  const int width = a.faults & kFaultHalfWarpReduce ? warpSize / 2 : warpSize;
  // Thread 0 reads the split's stretch of the block table into shared memory once, for
  // every thread's key reads (as kernels stage page indices), and a barrier publishes it.
  const int first_page = lo / kv.page_size;
  const int pages = n > 0 ? (hi - 1) / kv.page_size - first_page + 1 : 0;
  if (t == 0) {
    const int* table = kv.block_tables + static_cast<long long>(seq) * kv.max_pages;
    for (int i = 0; i < pages; ++i) split_pages[i] = table[first_page + i];
    if (a.faults & kFaultBarrierPerBranch) __syncthreads();  // the fault: one per branch
  } else if (a.faults & kFaultBarrierPerBranch) {
    __syncthreads();
  }
  if (!(a.faults & (kFaultPagesUnsynced | kFaultBarrierPerBranch))) __syncthreads();
  // Scores of every (q head of the group, key of the split), one key per thread at a time.
  for (int j = t; j < n; j += kDecodeThreads) {
    const long long slot = staged_slot(split_pages, first_page, kv.page_size, lo + j);
    for (int g = 0; g < group; ++g) {
      const float* q =
          a.q + (static_cast<long long>(row) * a.q_heads + first_head + g) * kv.head_dim;
      float s = 0.0f;
      for (int d = 0; d < kv.head_dim; ++d) s += q[d] * load_k(kv, slot, kv_head, d, a.faults);
      scores[g * kDecodeMaxKeysPerSplit + j] =
          feature_logit(a.features, s * a.scale, first_head + g, lo + j, length - 1);
    }
  }
  __syncthreads();
  // Each head's max and sum of exponentials, one warp per head; P rounded as declared
  // after the sum takes it unrounded.
  const int warp = t / warpSize, lane = t % warpSize;
  for (int g = warp; g < group; g += kDecodeThreads / warpSize) {
    float m = -__builtin_inff();
    for (int j = lane; j < n; j += warpSize) {
      const float s = scores[g * kDecodeMaxKeysPerSplit + j];
      m = m > s ? m : s;
    }
    m = warp_max(m, width);
    float sum = 0.0f;
    for (int j = lane; j < n; j += warpSize) {
      const float p = expf(scores[g * kDecodeMaxKeysPerSplit + j] - m);
      scores[g * kDecodeMaxKeysPerSplit + j] = round_to(p, a.p_dtype);
      sum += p;
    }
    sum = warp_sum(sum, width);
    if (lane == 0) {
      // The fault: every split's sum takes the sink (against its own max), so a row of k
      // non-empty splits counts it k times.
      if ((a.faults & kFaultSinkPerSplit) && a.features.sinks != nullptr && n > 0) {
        sum += expf(a.features.sinks[first_head + g] - m);
      }
      head_max[g] = m;
      head_sum[g] = sum;
    }
  }
  __syncthreads();
  // The partial rows: one (head, value dim) per thread at a time.
  for (int i = t; i < group * kv.value_dim; i += kDecodeThreads) {
    const int g = i / kv.value_dim, d = i % kv.value_dim;
    float acc = 0.0f;
    long long slot = 0;
    for (int j = 0; j < n; ++j) {
      // Keys of one page lie in consecutive slots: the page id is read once per page.
      const int pos = lo + j;
      slot = j == 0 || pos % kv.page_size == 0
                 ? staged_slot(split_pages, first_page, kv.page_size, pos)
                 : slot + 1;
      acc += scores[g * kDecodeMaxKeysPerSplit + j] * load_v(kv, slot, kv_head, d, a.faults);
    }
    const long long head = static_cast<long long>(row) * a.q_heads + first_head + g;
    a.partial_out[(head * a.splits + split) * kv.value_dim + d] = acc;
    if (d == 0) {
      a.partial_max[head * a.splits + split] = head_max[g];
      a.partial_sum[head * a.splits + split] = head_sum[g];
    }
  }
}

// Grid decode_merge_grid, kDecodeMergeThreads threads (one warp): out = sum_s e^(m_s - m) o_s /
// (sum_s e^(m_s - m) l_s + e^(z - m)) over the splits, m the largest split max or the row's
// sink logit z, whichever is larger (no sink: no z); an empty split (max -inf) weighs 0. Lane 0
// weighs the splits once into shared memory (the weights, then their total), a
// __syncwarp publishes them to the other lanes. Rows rounded to out_dtype as declared.
KVFUZZ_GLOBAL void paged_decode_merge(DecodeArgs a) {
  KVFUZZ_SHARED_ARRAY(float, split_weight, kDecodeMaxSplits + 1);  // the total last
  const long long head = static_cast<long long>(blockIdx.x) * a.q_heads + blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x);
  const int value_dim = a.kv.value_dim;
  if (lane == 0) {
    const bool sink = a.features.sinks != nullptr && !(a.faults & kFaultSinkPerSplit);
    const float z = sink ? a.features.sinks[blockIdx.y] : -__builtin_inff();
    float m = z;
    for (int s = 0; s < a.splits; ++s) {
      const float x = a.partial_max[head * a.splits + s];
      m = m > x ? m : x;
    }
    float total = sink ? expf(z - m) : 0.0f;
    for (int s = 0; s < a.splits; ++s) {
      const float x = a.partial_max[head * a.splits + s];
      const float w = x != -__builtin_inff() ? expf(x - m) : 0.0f;
      split_weight[s] = w;
      if (x != -__builtin_inff()) total += w * a.partial_sum[head * a.splits + s];
    }
    split_weight[kDecodeMaxSplits] = total;
  }
  if (!(a.faults & kFaultMergeNoSyncwarp)) __syncwarp();
  const float total = split_weight[kDecodeMaxSplits];
  for (int d = lane; d < value_dim; d += warpSize) {
    float acc = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
      const float x = a.partial_max[head * a.splits + s];
      if (x != -__builtin_inff()) {
        acc += split_weight[s] * a.partial_out[(head * a.splits + s) * value_dim + d];
      }
    }
    a.out[head * value_dim + d] = round_to(acc / total, a.out_dtype);
  }
}

}  // namespace kvfuzz::cuda
