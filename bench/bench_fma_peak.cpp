// One core's double-precision FMA peak (docs/BENCHMARKS.md, "The reference (attention oracle)"):
// independent FMA chains on vector registers, enough of them to cover the FMA latency on
// every pipe, so that the loop runs at the FMA units' throughput and nothing else. Each
// FMA counts 2 flops per lane. The widest of AVX-512, AVX2 and scalar that the CPU has is
// timed (and each narrower one), at runtime: the project builds without -march.
// Usage: bench_fma_peak [--seconds S] [--repeats R]. Prints a Markdown table of medians.
#include <cstdio>
#include <ctime>
#include <vector>

#include "bench_support.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr int kChains = 16;  // 2 pipes x latency 4 needs 8; 16 leaves room for others
constexpr long kInner = 1 << 14;

// Each kernel: `iterations` times kInner rounds of kChains independent FMAs, a = a * b + c
// with b slightly below 1 so nothing overflows. Returns a sum so the work is not removed.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_avx512(long iterations) {
  __m512d acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_pd(1.0 + i);
  const __m512d b = _mm512_set1_pd(0.999999), c = _mm512_set1_pd(1e-6);
  // (Fully unrolled, so that the accumulators live in registers, not in memory.)
  for (long it = 0; it < iterations * kInner; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_pd(acc[i], b, c);
  }
  __m512d sum = _mm512_setzero_pd();
  for (int i = 0; i < kChains; ++i) sum = _mm512_add_pd(sum, acc[i]);
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, sum);
  double total = 0;
  for (double x : lanes) total += x;
  return total;
}

__attribute__((target("avx2,fma"))) double fma_avx2(long iterations) {
  __m256d acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_pd(1.0 + i);
  const __m256d b = _mm256_set1_pd(0.999999), c = _mm256_set1_pd(1e-6);
  // (Fully unrolled, so that the accumulators live in registers, not in memory.)
  for (long it = 0; it < iterations * kInner; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_pd(acc[i], b, c);
  }
  __m256d sum = _mm256_setzero_pd();
  for (int i = 0; i < kChains; ++i) sum = _mm256_add_pd(sum, acc[i]);
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, sum);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

struct Kernel {
  const char* name;
  int lanes;
  double (*run)(long);
  bool available;
};

// This thread's CPU time: on a shared machine, wall time counts the other processes too
// (bench_checks times the reference the same way).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// GFLOP/s of one kernel over about `seconds` of CPU time.
double measure(const Kernel& k, double seconds, double& sink) {
  long iterations = 1;
  for (;;) {
    const double start = cpu_seconds();
    sink += k.run(iterations);
    const double took = cpu_seconds() - start;
    if (took >= seconds) {
      const double flops =
          2.0 * k.lanes * kChains * static_cast<double>(kInner) * static_cast<double>(iterations);
      return flops / took * 1e-9;
    }
    iterations *= 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto runs = kvfuzz::bench::parse_timed_runs(argc, argv);
  if (!runs) {
    std::fprintf(stderr, "usage: bench_fma_peak [--seconds S] [--repeats R]\n");
    return 2;
  }
  std::vector<Kernel> kernels;
#if defined(__x86_64__)
  __builtin_cpu_init();
  kernels.push_back({"AVX-512 (8 doubles)", 8, fma_avx512, __builtin_cpu_supports("avx512f") != 0});
  kernels.push_back({"AVX2 (4 doubles)", 4, fma_avx2,
                     __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")});
#endif
  std::printf("| kernel | GFLOP/s (1 core, double, median of %d) |\n|---|---:|\n", runs->repeats);
  double sink = 0;
  for (const Kernel& k : kernels) {
    if (!k.available) {
      std::printf("| %s | not supported |\n", k.name);
      continue;
    }
    std::vector<double> rates;
    for (int r = 0; r < runs->repeats; ++r) rates.push_back(measure(k, runs->seconds, sink));
    std::printf("| %s | %.1f |\n", k.name, kvfuzz::bench::median(rates));
    std::fflush(stdout);
  }
  return sink == 0 ? 1 : 0;  // never 0: the accumulators start at 1 and stay positive
}
