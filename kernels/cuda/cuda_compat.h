// What kernels/cuda/*.cuh include first: the same kernel source compiles with nvcc for a
// device and with the host C++ compiler for the SIMT launcher (cuda/simt/simt.h), which
// runs it on the CPU in every CI run. Kernels use CUDA's own names (threadIdx,
// __syncthreads, __shfl_xor_sync, ...) and, for what CUDA spells in a way C++ cannot
// express, these macros:
//   KVFUZZ_GLOBAL, KVFUZZ_DEVICE        __global__, __device__ (inline on the CPU: kernels
//                                       live in headers, compiled once per device file)
//   KVFUZZ_HOST_DEVICE                  __host__ __device__: a helper the host's launch
//                                       code calls too (decode_group_blocks)
//   KVFUZZ_SHARED_ARRAY(T, name, n)     __shared__ T name[n]: on the CPU, a pointer into
//                                       the block's shared memory (poisoned per block)
//   KVFUZZ_DYNAMIC_SHARED(T, name)      extern __shared__ T name[]
//   KVFUZZ_SHARED_PTR(T)                the type of a pointer into shared memory: T* on a
//                                       device, simt::Shared<T> on the CPU, through which
//                                       the launcher checks every access for races (index
//                                       it, p[i]; never *p)
//   KVFUZZ_LAUNCH(kernel, grid, block, shared, args...)   kernel<<<grid, block, shared>>>
//   KVFUZZ_MUL_ROUNDED(a, b)            __fmul_rn(a, b): a product nvcc may not fuse
// and one function, kvfuzz::cuda_compat::xor_butterfly(mask, x, width, op): a warp
// reduction's xor shuffles, a loop on a device and one warp operation on the CPU.
#pragma once

#ifdef __CUDACC__

// Kernels live in headers included by several translation units of one program: static
// kernels and inline device functions, so that no definition is made twice.
#define KVFUZZ_GLOBAL static __global__
#define KVFUZZ_DEVICE __device__ inline
#define KVFUZZ_HOST_DEVICE __host__ __device__ inline
#define KVFUZZ_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#define KVFUZZ_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
// An alias, not T*, so that `KVFUZZ_SHARED_PTR(float) a, b;` declares two pointers.
namespace kvfuzz::cuda_compat {
template <class T>
using SharedPtr = T*;
}  // namespace kvfuzz::cuda_compat
#define KVFUZZ_SHARED_PTR(T) ::kvfuzz::cuda_compat::SharedPtr<T>
#define KVFUZZ_LAUNCH(kernel, grid, block, shared, ...) \
  kernel<<<(grid), (block), (shared)>>>(__VA_ARGS__)
// a * b rounded to f32 before the sum it feeds: nvcc fuses `a * b + c` into one multiply-
// add, which the quantized formats' reference reads (kv_format.h, no FMA) do not.
#define KVFUZZ_MUL_ROUNDED(a, b) __fmul_rn((a), (b))

namespace kvfuzz::cuda_compat {
// The xor butterfly of a warp reduction: after it every lane of a width segment holds op
// over the segment's values, in the butterfly's order. `op` is a captureless lambda.
template <class T, class Op>
__device__ inline T xor_butterfly(unsigned mask, T x, int width, Op op) {
  for (int offset = width / 2; offset > 0; offset /= 2)
    x = op(x, __shfl_xor_sync(mask, x, offset, width));
  return x;
}
}  // namespace kvfuzz::cuda_compat

#else

#include <math.h>  // expf and friends, named as device code names them

#include "cuda/simt/simt.h"

#define KVFUZZ_GLOBAL inline
#define KVFUZZ_DEVICE inline
#define KVFUZZ_HOST_DEVICE inline
#define KVFUZZ_SHARED_ARRAY(T, name, n) \
  const ::kvfuzz::simt::Shared<T> name(::kvfuzz::simt::shared_array<T>(n, #name))
#define KVFUZZ_DYNAMIC_SHARED(T, name) \
  const ::kvfuzz::simt::Shared<T> name(::kvfuzz::simt::dynamic_shared_array<T>(#name))
#define KVFUZZ_SHARED_PTR(T) ::kvfuzz::simt::Shared<T>
#define KVFUZZ_MUL_ROUNDED(a, b) ((a) * (b))
#define KVFUZZ_LAUNCH(kernel, grid, block, shared, ...) \
  ::kvfuzz::simt::launch(#kernel, (grid), (block), (shared), [&] { kernel(__VA_ARGS__); })

using ::kvfuzz::simt::dim3;
#define threadIdx (::kvfuzz::simt::coordinates().thread_idx)
#define blockIdx (::kvfuzz::simt::coordinates().block_idx)
#define blockDim (::kvfuzz::simt::coordinates().block_dim)
#define gridDim (::kvfuzz::simt::coordinates().grid_dim)
constexpr int warpSize = ::kvfuzz::simt::kWarpSize;

inline void __syncthreads(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  ::kvfuzz::simt::sync_block(file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::kvfuzz::simt::sync_warp(mask);
}
template <class T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = warpSize) {
  return ::kvfuzz::simt::shfl(mask, value, source_lane, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  return ::kvfuzz::simt::shfl_xor(mask, value, lane_mask, width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  return ::kvfuzz::simt::shfl_down(mask, value, delta, width);
}
namespace kvfuzz::cuda_compat {
// The device's loop (above), run by the launcher as one warp operation that gives each lane
// the same bits (simt::butterfly): a fiber switch per lane per shuffle was most of the CUDA
// engines' time on the CPU.
template <class T, class Op>
inline T xor_butterfly(unsigned mask, T x, int width, Op op) {
  return ::kvfuzz::simt::butterfly(mask, x, width, op);
}
}  // namespace kvfuzz::cuda_compat
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::kvfuzz::simt::ballot(mask, predicate != 0);
}
inline int __any_sync(unsigned mask, int predicate) {
  return ::kvfuzz::simt::ballot(mask, predicate != 0) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  return ::kvfuzz::simt::ballot(mask, predicate != 0) == mask;
}

#endif
