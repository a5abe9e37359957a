// Chunked prefill: the tokens of one chunk of each sequence attend causally (and within a
// window) to the sequence's paged K/V, their own keys included (already stored in the
// cache), FlashAttention-2 style. Each block takes one (chunk, tile of kPrefillQueryTile
// queries, q head) and walks the keys its tile needs kPrefillKeyTile at a time through
// shared memory, keeping each row's running max, sum of exponentials and weighted sum of V
// (online softmax), so that no row's scores are ever held whole. Masks are taken at
// absolute positions: a chunk that starts mid-sequence sees the context before it.
#pragma once

#include <stddef.h>

#include "cuda/cuda_compat.h"
#include "cuda/logit_features.cuh"
#include "cuda/paged_kv.cuh"

namespace kvfuzz::cuda {

constexpr int kPrefillThreads = 128;
constexpr int kPrefillQueryTile = 16;  // queries of one chunk per block
constexpr int kPrefillKeyTile = 32;    // keys per shared-memory tile
constexpr int kPrefillMaxDim = 256;    // head_dim and value_dim at most this
static_assert(kPrefillQueryTile <= kPrefillThreads, "one thread per row keeps its softmax");

struct PrefillArgs {
  PagedKv kv;                      // the cache; every chunk's own K/V are already stored in it
  const float* q = nullptr;        // [token][q_head][head_dim], RoPE applied, f32
  const int* chunk_seq = nullptr;  // [chunks]: sequence of chunk c (row of kv.block_tables)
  // [chunks + 1]: chunk c is rows [first[c], first[c+1]) of q and out
  const int* chunk_first_token = nullptr;
  const int* chunk_first_pos = nullptr;  // [chunks]: absolute position of chunk c's first token
  int chunks = 0, q_heads = 0;
  int window = 0;  // 0: none; else query at p sees keys [p - window + 1, p]
  float scale = 1.0f;
  LogitFeatures features;  // the soft cap and ALiBi per score, chunked local; the sink at the end
  // P rounded to it (round_to) before P.V; the row's sum l takes P unrounded
  int p_dtype = kNoRounding;
  int out_dtype = kNoRounding;  // each output value rounded to it (round_to) at the end
  int faults = 0;               // KernelFault bits (paged_kv.cuh); 0 for honest engines
  float* out = nullptr;         // [token][q_head][value_dim]
};

// The block's dynamic shared memory, all floats, in this order (prefill_shared_floats
// counts the same): the query tile, the K and V tiles, the tile's scores (then P), each
// row's running max m, sum l and last rescale factor, and the rows' accumulators.
struct PrefillShared {
  KVFUZZ_SHARED_PTR(float) q, k, v, scores, m, l, rescale, acc;
};

KVFUZZ_DEVICE PrefillShared carve_prefill_shared(KVFUZZ_SHARED_PTR(float) base, int head_dim,
                                                 int value_dim) {
  PrefillShared s;
  s.q = base;
  s.k = s.q + kPrefillQueryTile * head_dim;
  s.v = s.k + kPrefillKeyTile * head_dim;
  s.scores = s.v + kPrefillKeyTile * value_dim;
  s.m = s.scores + kPrefillQueryTile * kPrefillKeyTile;
  s.l = s.m + kPrefillQueryTile;
  s.rescale = s.l + kPrefillQueryTile;
  s.acc = s.rescale + kPrefillQueryTile;
  return s;
}

inline size_t prefill_shared_floats(int head_dim, int value_dim) {
  return static_cast<size_t>((kPrefillQueryTile + kPrefillKeyTile) * head_dim +
                             (kPrefillKeyTile + kPrefillQueryTile) * value_dim +
                             kPrefillQueryTile * kPrefillKeyTile + 3 * kPrefillQueryTile);
}

// Dynamic shared memory bytes of one block for these head sizes: 98 KiB at 256 and 256,
// past the 48 KiB a device launch gets unasked (cudaFuncAttributeMaxDynamicSharedMemorySize).
inline size_t prefill_shared_bytes(int head_dim, int value_dim) {
  return prefill_shared_floats(head_dim, value_dim) * sizeof(float);
}

// Grid: (chunks, ceil(longest chunk / kPrefillQueryTile), q_heads); block kPrefillThreads.
inline dim3 prefill_grid(int chunks, int longest_chunk_tokens, int q_heads) {
  return dim3(
      static_cast<unsigned>(chunks),
      static_cast<unsigned>((longest_chunk_tokens + kPrefillQueryTile - 1) / kPrefillQueryTile),
      static_cast<unsigned>(q_heads));
}

// Keys [key0, key0 + n) of `seq` into the K and V tiles, one element per thread at a time.
KVFUZZ_DEVICE void load_kv_tile(const PrefillArgs& a, const PrefillShared& s, int seq, int kv_head,
                                int key0, int n, int t) {
  const PagedKv& kv = a.kv;
  for (int i = t; i < n * kv.head_dim; i += kPrefillThreads) {
    const int j = i / kv.head_dim, d = i % kv.head_dim;
    s.k[i] = load_k(kv, kv_slot(kv, seq, key0 + j), kv_head, d, a.faults);
  }
  for (int i = t; i < n * kv.value_dim; i += kPrefillThreads) {
    const int j = i / kv.value_dim, d = i % kv.value_dim;
    s.v[i] = load_v(kv, kv_slot(kv, seq, key0 + j), kv_head, d, a.faults);
  }
}

// Scores of q head h's `rows` queries (positions pos0 + r) x the tile's n keys (key0 + j); a
// key the query may not see (after it, or before its window or chunk) scores -inf and reads
// no K. Threads
// take the queries of one key side by side, so each thread scores keys a quarter tile
// apart, which other threads loaded (what a missing barrier gets wrong, even at head_dim 1).
KVFUZZ_DEVICE void tile_scores(const PrefillArgs& a, const PrefillShared& s, int h, int rows,
                               int pos0, int key0, int n, int t) {
  const int head_dim = a.kv.head_dim;
  for (int i = t; i < kPrefillQueryTile * kPrefillKeyTile; i += kPrefillThreads) {
    const int r = i % kPrefillQueryTile, j = i / kPrefillQueryTile;
    if (r >= rows || j >= n) continue;
    const int query = pos0 + r, key = key0 + j;
    const int score = r * kPrefillKeyTile + j;
    if (key > query || key < first_visible_key(query, a.window, a.features.chunked_local)) {
      s.scores[score] = -__builtin_inff();
      continue;
    }
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot += s.q[r * head_dim + d] * s.k[j * head_dim + d];
    s.scores[score] = feature_logit(a.features, a.scale * dot, h, key, query);
  }
}

// Online softmax of row r over the tile: the new running max, the factor that rescales
// what the row has summed so far, P in place of the scores (rounded to p_dtype for P.V)
// and l, which takes P unrounded.
KVFUZZ_DEVICE void tile_softmax(const PrefillArgs& a, const PrefillShared& s, int r, int n) {
  const auto p = s.scores + r * kPrefillKeyTile;
  const float m_old = s.m[r];
  float m_new = m_old;
  for (int j = 0; j < n; ++j) m_new = p[j] > m_new ? p[j] : m_new;
  // A row that has seen no visible key yet keeps m = -inf: its P are 0, not
  // exp(-inf - -inf) = NaN, and its (zero) sums are left as they are.
  const bool none = m_new == -__builtin_inff();
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float e = none ? 0.0f : expf(p[j] - m_new);
    p[j] = round_to(e, a.p_dtype);
    sum += e;
  }
  const float rescale = none ? 1.0f : expf(m_old - m_new);  // 0 for the row's first keys
  s.l[r] = s.l[r] * rescale + sum;
  s.m[r] = m_new;
  s.rescale[r] = rescale;
}

// Grid prefill_grid(...), block kPrefillThreads, prefill_shared_bytes(head_dim, value_dim).
KVFUZZ_GLOBAL void chunked_prefill(PrefillArgs a) {
  KVFUZZ_DYNAMIC_SHARED(float, shared);
  const PagedKv& kv = a.kv;
  const int c = static_cast<int>(blockIdx.x);
  const int first_query = static_cast<int>(blockIdx.y) * kPrefillQueryTile;  // in the chunk
  const int h = static_cast<int>(blockIdx.z);
  const int t = static_cast<int>(threadIdx.x);
  const int chunk_tokens = a.chunk_first_token[c + 1] - a.chunk_first_token[c];
  // The grid is sized by the longest chunk: a shorter chunk's surplus tiles do nothing.
  if (first_query >= chunk_tokens) return;
  const int rest = chunk_tokens - first_query;
  const int rows = rest < kPrefillQueryTile ? rest : kPrefillQueryTile;
  const int seq = a.chunk_seq[c];
  const int kv_head = h / (a.q_heads / kv.kv_heads);
  const long long token0 = a.chunk_first_token[c] + first_query;
  const int pos0 = a.chunk_first_pos[c] + first_query;
  // Keys the tile needs: from its first query's first visible key to its last query.
  const int lo = first_visible_key(pos0, a.window, a.features.chunked_local);
  const int hi = pos0 + rows;
  const PrefillShared s = carve_prefill_shared(shared, kv.head_dim, kv.value_dim);

  // Each thread sets up what only it reads or writes until the end (its accumulators, and
  // thread r row r's m and l): no barrier; the q tile waits for the loop's first one.
  for (int i = t; i < rows * kv.head_dim; i += kPrefillThreads) {
    const int r = i / kv.head_dim, d = i % kv.head_dim;
    s.q[i] = a.q[((token0 + r) * a.q_heads + h) * kv.head_dim + d];
  }
  for (int i = t; i < rows * kv.value_dim; i += kPrefillThreads) s.acc[i] = 0.0f;
  if (t < rows) {
    s.m[t] = -__builtin_inff();
    s.l[t] = 0.0f;
  }

  for (int key0 = lo; key0 < hi; key0 += kPrefillKeyTile) {
    const int n = hi - key0 < kPrefillKeyTile ? hi - key0 : kPrefillKeyTile;
    __syncthreads();  // the previous tile's readers are done (and the q tile is written)
    load_kv_tile(a, s, seq, kv_head, key0, n, t);
    // The fault leaves out this barrier: threads then score keys others have not loaded.
    if (!(a.faults & kFaultMissingTileSync)) __syncthreads();
    tile_scores(a, s, h, rows, pos0, key0, n, t);
    __syncthreads();
    if (t < rows) tile_softmax(a, s, t, n);
    __syncthreads();
    // acc = acc * rescale + P.V, one (row, value dim) per thread at a time.
    for (int i = t; i < rows * kv.value_dim; i += kPrefillThreads) {
      const int r = i / kv.value_dim, d = i % kv.value_dim;
      float acc = s.acc[i] * s.rescale[r];
      for (int j = 0; j < n; ++j)
        acc += s.scores[r * kPrefillKeyTile + j] * s.v[j * kv.value_dim + d];
      s.acc[i] = acc;
    }
  }

  // Each thread finishes the accumulators it kept (m and l were written before the last
  // barrier). A sink z joins the row's softmax here: against M = max(m, z) the row is
  // acc e^(m - M) / (l e^(m - M) + e^(z - M)).
  for (int i = t; i < rows * kv.value_dim; i += kPrefillThreads) {
    const int r = i / kv.value_dim, d = i % kv.value_dim;
    float acc = s.acc[i], l = s.l[r];
    if (a.features.sinks != nullptr) {
      const float z = a.features.sinks[h], m = s.m[r];
      const float top = m > z ? m : z;
      const float keep = expf(m - top);
      acc *= keep;
      l = l * keep + expf(z - top);
    }
    a.out[((token0 + r) * a.q_heads + h) * kv.value_dim + d] = round_to(acc / l, a.out_dtype);
  }
}

}  // namespace kvfuzz::cuda
