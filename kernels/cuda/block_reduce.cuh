// Block-wide max and sum of one float per thread: a warp reduction by xor shuffles, each
// warp's result through shared memory, then the first warp reduces those. The building
// block of the attention kernels' softmax (the row max and the sum of exponentials), and
// the first kernel source compiled both ways (cuda_compat.h).
#pragma once

#include "cuda/cuda_compat.h"

namespace kvfuzz::cuda {

// The maximum over a warp (every lane gets it); `width` < warpSize reduces each segment of
// that many lanes alone (what the half-warp-reduce mutant passes by mistake).
KVFUZZ_DEVICE float warp_max(float x, int width = warpSize) {
  return cuda_compat::xor_butterfly(
      0xffffffffu, x, width, [](float own, float other) { return own > other ? own : other; });
}

KVFUZZ_DEVICE float warp_sum(float x, int width = warpSize) {
  return cuda_compat::xor_butterfly(0xffffffffu, x, width,
                                    [](float own, float other) { return own + other; });
}

// out[blockIdx.x] = max and out[gridDim.x + blockIdx.x] = sum of in[blockIdx.x * n + t]
// over t < n, with blockDim.x a multiple of warpSize up to 1024.
KVFUZZ_GLOBAL void block_max_sum(const float* in, int n, float* out) {
  KVFUZZ_SHARED_ARRAY(float, partial_max, 32);
  KVFUZZ_SHARED_ARRAY(float, partial_sum, 32);
  const int t = static_cast<int>(threadIdx.x);
  const int warps = static_cast<int>(blockDim.x) / warpSize;
  const float* row = in + static_cast<long long>(blockIdx.x) * n;
  float m = -__builtin_inff(), s = 0.0f;
  for (int i = t; i < n; i += static_cast<int>(blockDim.x)) {
    m = m > row[i] ? m : row[i];
    s += row[i];
  }
  m = warp_max(m);
  s = warp_sum(s);
  if (t % warpSize == 0) {
    partial_max[t / warpSize] = m;
    partial_sum[t / warpSize] = s;
  }
  __syncthreads();
  if (t < warpSize) {
    m = t < warps ? partial_max[t] : -__builtin_inff();
    s = t < warps ? partial_sum[t] : 0.0f;
    m = warp_max(m);
    s = warp_sum(s);
    if (t == 0) {
      out[blockIdx.x] = m;
      out[gridDim.x + blockIdx.x] = s;
    }
  }
}

}  // namespace kvfuzz::cuda
