// The paged K/V cache as the attention kernels see it: two pools of pages in a storage
// dtype, a block table per sequence, and the element offsets into them, computed in 64
// bits (a pool of a few GiB holds more than 2^31 elements). One struct shared by every
// kernel that reads or writes the cache (kv_cache.cuh, paged_decode.cuh,
// chunked_prefill.cuh).
//
// Faults: the kernel-only bugs the CUDA mutants plant (kernels/mutants/cuda_mutants.cpp).
// A fault is a bit of `faults` in a kernel's arguments that turns one line of honest code
// into the bug, so that a mutant runs the very kernel the honest engines run. Honest
// engines pass 0.
#pragma once

#include "cuda/blocks.cuh"
#include "cuda/cuda_compat.h"
#include "cuda/dtype.cuh"

namespace kvfuzz::cuda {

enum KernelFault : int {
  // chunked prefill: no __syncthreads between loading a K/V tile into shared memory and
  // reading it (threads read slots other threads have not written yet: poison).
  kFaultMissingTileSync = 1 << 0,
  // paged decode: a split left empty by the batch's longest row writes nothing, yet the
  // merge reads its partial (max, sum and row: whatever the scratch held).
  kFaultEmptySplitUnwritten = 1 << 1,
  // paged decode: the warp reductions of the softmax shuffle over width 16, so each half
  // warp reduces alone and lane 0 keeps half the row's max and sum.
  kFaultHalfWarpReduce = 1 << 2,
  // paged decode: the last split's key bound is the length plus one: it reads the slot
  // after the row's own key (the poisoned tail of its page, or page 0 of the pool).
  kFaultSplitBoundPastLength = 1 << 3,
  // the attention kernels' reads (not the cache write): a K/V element offset computed in
  // 32 bits, which wraps once a physical page lies past 2^32 elements.
  kFaultOffset32 = 1 << 4,
  // Hazards (races and divergent barriers) the launcher's checks name, which its thread
  // order alone does not show: each gives the right rows in thread order.
  // paged decode: thread 0 stages the split's page ids in shared memory and no barrier
  // follows: every other thread reads them unordered (a race: read after write).
  kFaultPagesUnsynced = 1 << 5,
  // paged decode: the barrier after the staging written once in each branch of
  // `if (t == 0)`: the block meets at two call sites (barrier-divergence).
  kFaultBarrierPerBranch = 1 << 6,
  // paged decode merge: lane 0 weighs the splits into shared memory and no __syncwarp
  // follows, as if the warp ran in lockstep (a race between lanes of one warp).
  kFaultMergeNoSyncwarp = 1 << 7,
  // paged decode: every split's sum of exponentials takes the row's sink, instead of the
  // merge taking it once (a sink counted once per split that holds keys).
  kFaultSinkPerSplit = 1 << 8,
  // the attention kernels' reads: an fp8 V read back without its scale (K keeps its own),
  // as a kernel whose V path forgets the v_scale argument; under MLA, the latent read as
  // the value without K's scale (the scale applied in the score pass only).
  kFaultFp8VScaleDropped = 1 << 9,
  // the attention kernels' reads of a q4_0 key block: element j's quant taken from the
  // other nibble (high for j < 16), as a kernel that unpacks ggml's nibbles the other way.
  kFaultQ4NibblesSwapped = 1 << 10,
  // the attention kernels' reads of an MLA value (value_from_key): the value taken from the
  // key row's last value_dim elements instead of its first, as a kernel that reads the
  // latent from the wrong end of a [latent | RoPE part] row.
  kFaultMlaValueAtKeyEnd = 1 << 11,
  // the attention kernels' reads of an affine group (K and V): each byte's quants unpacked
  // from its high bits, as a kernel that reads MLX's little-endian words the other way.
  kFaultAffineHighFirst = 1 << 12,
  // the RoPE kernels' part of a head (Layout::rope_dims): the head's first rope_dims
  // elements turned instead of its last, GPT-NeoX's partial rotary where the layout has
  // DeepSeek's [latent | RoPE part] (an engine that hands the kernels the wrong offset).
  kFaultRopePartAtFront = 1 << 13,
};

struct PagedKv {
  const void* k = nullptr;  // [page][slot][kv_head][head_dim], `k_type` elements
  const void* v = nullptr;  // [page][slot][kv_head][value_dim], `v_type`
  int k_type = kStorageF32, v_type = kStorageF32;  // the dtype, fp8 or a block format
  const float* k_scales = nullptr;                 // fp8: [kv_head], the element read back times it
  const float* v_scales = nullptr;
  const int* block_tables = nullptr;  // [sequence][max_pages]: physical page ids
  int max_pages = 0;
  int page_size = 1, kv_heads = 1, head_dim = 1, value_dim = 1;
  int group = 0;  // an affine format's group size (K and V alike); 0 for the others
  // MLA (Layout::value_from_key): no V pool; a value is its key row's first value_dim
  // elements, read from `k` in K's type and scales.
  bool value_from_key = false;
};

// The physical slot (page * page_size + slot in page) of position `pos` of `seq`.
KVFUZZ_DEVICE long long kv_slot(const PagedKv& kv, int seq, int pos) {
  const int page = kv.block_tables[static_cast<long long>(seq) * kv.max_pages + pos / kv.page_size];
  return static_cast<long long>(page) * kv.page_size + pos % kv.page_size;
}

// The element offset of the first of `width` elements of (slot, kv_head).
KVFUZZ_DEVICE long long kv_offset(long long slot, int kv_head, int kv_heads, int width,
                                  int faults) {
  if (faults & kFaultOffset32) {
    // The bug: `unsigned offset = (slot * kv_heads + kv) * dim`, 32-bit arithmetic.
    return (static_cast<unsigned>(slot) * static_cast<unsigned>(kv_heads) +
            static_cast<unsigned>(kv_head)) *
           static_cast<unsigned>(width);
  }
  return (slot * kv_heads + kv_head) * width;
}

// Element d of (slot, kv_head)'s row of `width` in a pool of `type`: an element array, or
// (a block or affine format, groups of `group`) rows of whole blocks.
KVFUZZ_DEVICE float load_row_element(const void* pool, int type, long long slot, int kv_head,
                                     int kv_heads, int width, int group, int d, int faults) {
  if (!is_block_type(type)) {
    return load_element(pool, kv_offset(slot, kv_head, kv_heads, width, faults) + d, type);
  }
  const long long row = kv_offset(slot, kv_head, kv_heads, 1, faults);
  const unsigned char* bytes =
      static_cast<const unsigned char*>(pool) + row * block_row_bytes(type, width, group);
  if ((faults & kFaultQ4NibblesSwapped) && type == kStorageQ4_0) {
    d = d % kBlock < kBlock / 2 ? d + kBlock / 2 : d - kBlock / 2;  // the other nibble, same scale
  }
  return load_block_element(bytes, d, type, group, (faults & kFaultAffineHighFirst) != 0);
}

KVFUZZ_DEVICE float load_k(const PagedKv& kv, long long slot, int kv_head, int d, int faults) {
  const float x = load_row_element(kv.k, kv.k_type, slot, kv_head, kv.kv_heads, kv.head_dim,
                                   kv.group, d, faults);
  return kv.k_scales ? x * kv.k_scales[kv_head] : x;
}
KVFUZZ_DEVICE float load_v(const PagedKv& kv, long long slot, int kv_head, int d, int faults) {
  // Under MLA the value is the latent: the key row's first elements, in K's format and with
  // K's scale; else V's own row.
  const bool latent = kv.value_from_key;
  const int at = latent && (faults & kFaultMlaValueAtKeyEnd) ? kv.head_dim - kv.value_dim + d : d;
  const float x = load_row_element(latent ? kv.k : kv.v, latent ? kv.k_type : kv.v_type, slot,
                                   kv_head, kv.kv_heads, latent ? kv.head_dim : kv.value_dim,
                                   kv.group, at, faults & ~kFaultQ4NibblesSwapped);
  const float* scales = latent ? kv.k_scales : kv.v_scales;
  const bool scaled = scales && !(faults & kFaultFp8VScaleDropped);
  return scaled ? x * scales[kv_head] : x;
}

}  // namespace kvfuzz::cuda
