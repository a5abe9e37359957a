// The first kernel compiled both ways (kernels/cuda/block_reduce.cuh): on the SIMT
// launcher it gives each block's max and sum, for any block size that is a multiple of the
// warp size and any row length; the launcher's poison makes a missing barrier visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "cuda/block_reduce.cuh"

namespace kvfuzz::cuda {
namespace {

TEST(BlockReduce, MaxAndSumOfEachBlocksRow) {
  for (int threads : {32, 64, 256}) {
    for (int n : {1, 31, 200, 1000}) {
      const int blocks = 3;
      std::vector<float> in(static_cast<size_t>(blocks * n)), out(2 * blocks);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 37) % 101) - 50;
      KVFUZZ_LAUNCH(block_max_sum, dim3(blocks), dim3(static_cast<unsigned>(threads)), 0, in.data(),
                    n, out.data());
      for (int b = 0; b < blocks; ++b) {
        const auto first = in.begin() + b * n, last = first + n;
        SCOPED_TRACE("threads " + std::to_string(threads) + ", n " + std::to_string(n));
        EXPECT_EQ(out[b], *std::max_element(first, last));
        EXPECT_EQ(out[blocks + b], std::accumulate(first, last, 0.0f));  // small integers: exact
      }
    }
  }
}

// The kernel with its __syncthreads left out: the first warp reads the other warps'
// partials before they are written, and the launcher's poison (NaN) shows it.
KVFUZZ_GLOBAL void block_max_sum_without_barrier(const float* in, int n, float* out) {
  KVFUZZ_SHARED_ARRAY(float, partial_sum, 32);
  const int t = static_cast<int>(threadIdx.x);
  const int warps = static_cast<int>(blockDim.x) / warpSize;
  float s = 0.0f;
  for (int i = t; i < n; i += static_cast<int>(blockDim.x)) s += in[i];
  s = warp_sum(s);
  if (t % warpSize == 0) partial_sum[t / warpSize] = s;
  if (t < warpSize) {  // BUG: no __syncthreads() before reading the partials
    s = warp_sum(t < warps ? partial_sum[t] : 0.0f);
    if (t == 0) out[0] = s;
  }
}

TEST(BlockReduce, WithoutTheBarrierThePartialsArePoison) {
  std::vector<float> in(256, 1.0f), out(2);
  {
    // The launcher without its checks: warp 0 reads the partials before warps 1..3 ran.
    const simt::LaunchSettings unchecked({}, simt::Checks{false, false});
    KVFUZZ_LAUNCH(block_max_sum_without_barrier, dim3(1), dim3(128), 0, in.data(), 256, out.data());
    EXPECT_TRUE(std::isnan(out[0])) << out[0];
  }
  // With them (the default), the race is named before the poison is read.
  try {
    KVFUZZ_LAUNCH(block_max_sum_without_barrier, dim3(1), dim3(128), 0, in.data(), 256, out.data());
    ADD_FAILURE() << "no race named";
  } catch (const simt::HazardError& e) {
    EXPECT_EQ(e.hazard, simt::Hazard::race);
    EXPECT_NE(std::string(e.what()).find("on shared memory `partial_"), std::string::npos)
        << e.what();
  }
  KVFUZZ_LAUNCH(block_max_sum, dim3(1), dim3(128), 0, in.data(), 256, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 256.0f);
}

}  // namespace
}  // namespace kvfuzz::cuda
