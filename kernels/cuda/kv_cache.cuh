// The kernels that write the paged cache, as serving engines have them beside attention:
// append_kv rotates each new token's key at its position and stores K and V in the
// storage dtype at the slot the engine mapped it to (vLLM's rotary embedding and
// reshape_and_cache in one), rope_queries rotates the queries the same way, and
// fill_elements / copy_elements poison freed slots and copy pages for copy-on-write.
// RoPE turns the pairs of the layout's RoPE part (scenario.h's RopeShape: the head's last
// `dims` elements, in NeoX's half split or GPT-J's interleaved pairs) with cos and sin given
// per token (the engine computes the angles in double and rounds cos and sin to f32, as a
// cos/sin cache holds them).
#pragma once

#include "cuda/blocks.cuh"
#include "cuda/cuda_compat.h"
#include "cuda/dtype.cuh"

namespace kvfuzz::cuda {

constexpr int kCacheThreads = 128;
// Blocks of the element-wise kernels (fill, copy) for n elements: a grid-stride loop over
// at most 8 blocks of kCacheThreads, and no more blocks than the elements fill, since each
// block's threads are fibers on the SIMT launcher (a page tail's poison takes one block).
constexpr long long kElementBlocks = 8;
inline dim3 element_grid(long long n) {
  const long long blocks = (n + kCacheThreads - 1) / kCacheThreads;
  return dim3(static_cast<unsigned>(blocks < 1                ? 1
                                    : blocks < kElementBlocks ? blocks
                                                              : kElementBlocks));
}

// RoPE's part of a head as the kernels turn it (scenario.h's RopeShape on the device).
struct RopeArgs {
  const float* cos = nullptr;  // [token][dims / 2]; nullptr: no RoPE
  const float* sin = nullptr;
  int dims = 0;              // the part's width (even)
  int offset = 0;            // its first element (head_dim - dims); the elements outside it stay
  bool interleaved = false;  // pairs (2i, 2i + 1) of the part; else (i, i + dims / 2)

  // The same part with cos and sin of one token.
  KVFUZZ_DEVICE RopeArgs at(long long token) const {
    RopeArgs r = *this;
    if (cos != nullptr) {
      r.cos = cos + token * (dims / 2);
      r.sin = sin + token * (dims / 2);
    }
    return r;
  }
};

// Element d of x turned by RoPE (r holds one token's cos and sin): for pair i of the part,
// (a, b) -> (a c_i - b s_i, a s_i + b c_i), in f32 as cpu::rope_apply does it.
KVFUZZ_DEVICE float rotated(const float* x, const RopeArgs& r, int d) {
  if (r.cos == nullptr || d < r.offset || d >= r.offset + r.dims) return x[d];
  const int in = d - r.offset, half = r.dims / 2;
  const int i = r.interleaved ? in / 2 : in < half ? in : in - half;
  const int first = r.offset + (r.interleaved ? 2 * i : i);
  const int second = first + (r.interleaved ? 1 : half);
  const float a = x[first], b = x[second];
  return d == first ? a * r.cos[i] - b * r.sin[i] : a * r.sin[i] + b * r.cos[i];
}

struct AppendArgs {
  void* k_pool = nullptr;   // [page][slot][kv_head][head_dim], `k_type`
  void* v_pool = nullptr;   // [page][slot][kv_head][value_dim], `v_type`; nullptr: MLA
  int dtype = kStorageF32;  // the layout's: every element is rounded to it first
  int k_type = kStorageF32, v_type = kStorageF32;  // the dtype, fp8 or a block format
  const float* k_scales = nullptr;                 // fp8: [kv_head] (x / s stored); else nullptr
  const float* v_scales = nullptr;
  const float* k = nullptr;          // [token][kv_head][head_dim], unrotated
  const float* v = nullptr;          // [token][kv_head][value_dim]
  const long long* slots = nullptr;  // [token]: physical slot (page * page_size + slot)
  RopeArgs rope;                     // the keys' RoPE (cos nullptr: none)
  int kv_heads = 1, head_dim = 1, value_dim = 1;
  int group = 0;  // an affine format's group size; 0 for the others
};

// x as a cache of `type` stores it: rounded to the layout's dtype, then (fp8) divided by
// its kv head's scale and converted (kv_format.h).
KVFUZZ_DEVICE void store_cached(void* pool, long long i, float x, int dtype, int type,
                                const float* scales, int kv_head) {
  x = round_to(x, dtype);
  if (scales != nullptr) x = x / scales[kv_head];
  store_element(pool, i, x, type);
}

// One token's rows of `width` per kv head (K rotated by cos/sin, or V) stored in a pool of
// a block format (blocks of 32) or an affine one (groups of `group`): a thread per block,
// each element rounded to the dtype first.
KVFUZZ_DEVICE void store_block_rows(void* pool, int type, long long slot, const float* x,
                                    int kv_heads, int width, int group, int dtype,
                                    const RopeArgs& rope) {
  const bool affine = is_affine_type(type);
  const int size = affine ? group : kBlock;
  const int bytes_per_block = affine ? affine_group_bytes(type, group) : block_bytes(type);
  const int per_row = width / size;
  for (int i = static_cast<int>(threadIdx.x); i < kv_heads * per_row; i += kCacheThreads) {
    const int head = i / per_row, b = i % per_row;
    const float* row = x + static_cast<long long>(head) * width;
    float block[kMaxAffineGroup];
    for (int j = 0; j < size; ++j) {
      block[j] = round_to(rotated(row, rope, b * size + j), dtype);
    }
    unsigned char* bytes = static_cast<unsigned char*>(pool) +
                           (slot * kv_heads + head) * block_row_bytes(type, width, group) +
                           static_cast<long long>(b) * bytes_per_block;
    if (affine) {
      store_affine_group(block, bytes, type, group, dtype);
    } else {
      store_block(block, bytes, type);
    }
  }
}

// Grid (tokens), kCacheThreads threads: one token per block.
KVFUZZ_GLOBAL void append_kv(AppendArgs a) {
  const long long token = blockIdx.x;
  const long long slot = a.slots[token];
  const RopeArgs rope = a.rope.at(token);
  // MLA caches no value: its kernels read the key's latent (paged_kv.cuh, load_v).
  const int keys = a.kv_heads * a.head_dim, values = a.v_pool ? a.kv_heads * a.value_dim : 0;
  if (is_block_type(a.k_type)) {
    store_block_rows(a.k_pool, a.k_type, slot, a.k + token * keys, a.kv_heads, a.head_dim, a.group,
                     a.dtype, rope);
  }
  if (is_block_type(a.v_type) && a.v_pool) {
    store_block_rows(a.v_pool, a.v_type, slot, a.v + token * values, a.kv_heads, a.value_dim,
                     a.group, a.dtype, RopeArgs{});
  }
  for (int i = static_cast<int>(threadIdx.x); i < keys && !is_block_type(a.k_type);
       i += kCacheThreads) {
    const int head = i / a.head_dim, d = i % a.head_dim;
    const float* k = a.k + (token * a.kv_heads + head) * a.head_dim;
    store_cached(a.k_pool, slot * keys + i, rotated(k, rope, d), a.dtype, a.k_type, a.k_scales,
                 head);
  }
  for (int i = static_cast<int>(threadIdx.x); i < values && !is_block_type(a.v_type);
       i += kCacheThreads) {
    store_cached(a.v_pool, slot * values + i, a.v[token * values + i], a.dtype, a.v_type,
                 a.v_scales, i / a.value_dim);
  }
}

// Grid (tokens), kCacheThreads threads: q_out = q_in rotated at each token's position, f32.
KVFUZZ_GLOBAL void rope_queries(const float* q_in, float* q_out, RopeArgs rope, int q_heads,
                                int head_dim) {
  const long long token = blockIdx.x;
  const RopeArgs r = rope.at(token);
  const int n = q_heads * head_dim;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kCacheThreads) {
    const float* q = q_in + token * n + i / head_dim * head_dim;
    q_out[token * n + i] = rotated(q, r, i % head_dim);
  }
}

// The elements [begin, end) of n that the calling thread takes in an element-wise kernel: a
// contiguous share per thread, not a grid-stride loop. On the SIMT launcher a block's
// threads run one after another, and a grid-stride loop had each thread touch every cache
// line of the array (the pool's poison fill was a tenth of the CUDA engines' time); on a
// GPU the uncoalesced stores cost a poison fill or copy-on-write copy little.
struct ThreadShare {
  long long begin, end;
};
KVFUZZ_DEVICE ThreadShare thread_share(long long n) {
  const long long threads = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  return {n / threads * t + (t < n % threads ? t : n % threads),
          n / threads * (t + 1) + (t + 1 < n % threads ? t + 1 : n % threads)};
}

template <typename T>
KVFUZZ_DEVICE void fill_share(T* array, ThreadShare share, T bits) {
  for (long long i = share.begin; i < share.end; ++i) array[i] = bits;
}

template <typename T>
KVFUZZ_DEVICE void copy_share(T* array, long long from, long long to, ThreadShare share) {
  for (long long i = share.begin; i < share.end; ++i) array[to + i] = array[from + i];
}

// Elements [first, first + n) of a `dtype` array set to `bits`, one element's encoding
// (its low 16 bits for f16 and bf16), made once by the caller rather than per element.
KVFUZZ_GLOBAL void fill_elements(void* array, long long first, long long n, unsigned bits,
                                 int dtype) {
  const ThreadShare share = thread_share(n);
  if (dtype == kStorageF32) {
    fill_share(static_cast<unsigned*>(array) + first, share, bits);
  } else if (dtype >= kStorageFp8E4m3) {  // fp8, and a block pool's bytes
    fill_share(static_cast<unsigned char*>(array) + first, share, static_cast<unsigned char>(bits));
  } else {
    fill_share(static_cast<unsigned short*>(array) + first, share,
               static_cast<unsigned short>(bits));
  }
}

// Elements [to, to + n) of a `dtype` array set to [from, from + n), bit for bit (the ranges
// do not overlap).
KVFUZZ_GLOBAL void copy_elements(void* array, long long from, long long to, long long n,
                                 int dtype) {
  const ThreadShare share = thread_share(n);
  if (dtype == kStorageF32) {
    copy_share(static_cast<unsigned*>(array), from, to, share);
  } else if (dtype >= kStorageFp8E4m3) {
    copy_share(static_cast<unsigned char*>(array), from, to, share);
  } else {
    copy_share(static_cast<unsigned short*>(array), from, to, share);
  }
}

}  // namespace kvfuzz::cuda
