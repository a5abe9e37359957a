// The SIMT launcher's cost (docs/BENCHMARKS.md, "The SIMT launcher on the CPU"): launches of
// block_max_sum (kernels/cuda/block_reduce.cuh), 64 blocks of 128 threads over rows of
// 1024 floats, each thread through ten warp shuffles and one __syncthreads. Per launch:
// 8192 fibers started, about 100 thousand switches. Prints the median time per launch.
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_support.h"
#include "cuda/block_reduce.cuh"

int main(int argc, char** argv) {
  const auto runs = kvfuzz::bench::parse_timed_runs(argc, argv);
  if (!runs) {
    std::fprintf(stderr, "usage: bench_simt [--seconds S] [--repeats R]\n");
    return 2;
  }
  constexpr int kBlocks = 64, kThreads = 128, kRow = 1024;
  std::vector<float> in(static_cast<size_t>(kBlocks) * kRow, 1.0f), out(2 * kBlocks);
  std::vector<double> per_launch_ms;
  for (int r = 0; r < runs->repeats; ++r) {
    int launches = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (elapsed < runs->seconds) {
      KVFUZZ_LAUNCH(kvfuzz::cuda::block_max_sum, dim3(kBlocks), dim3(kThreads), 0, in.data(), kRow,
                    out.data());
      ++launches;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    per_launch_ms.push_back(1e3 * elapsed / launches);
  }
  if (out[kBlocks] != kRow) {
    std::fprintf(stderr, "bench_simt: wrong sum %g\n", static_cast<double>(out[kBlocks]));
    return 1;
  }
  std::printf("block_max_sum, %d blocks x %d threads: %.3f ms per launch (median of %d)\n", kBlocks,
              kThreads, kvfuzz::bench::median(per_launch_ms), runs->repeats);
  return 0;
}
