// The paged decode kernel's bandwidth on a GPU (docs/BENCHMARKS.md, "CUDA engines on a
// device"; run by scripts/gpu-check.sh). Decode reads every visible key and value once per
// (sequence, kv head) and does little arithmetic per byte, so its speed is the bytes of
// K/V it reads over the time it takes, and the yardstick is what the same device does
// with the same bytes at its best: a device-to-device cudaMemcpy.
//
// A large paged cache in bf16 (by default batch 64 x context 4096, 8 kv heads, 32 q heads,
// head_dim 128, pages of 16 tokens: 1 GiB of K/V, far past the L2), block tables shuffled
// so that consecutive pages of a sequence lie anywhere in the pool, as in a serving
// engine that has run a while. paged_decode_split + paged_decode_merge are launched as
// cuda_engine.cpp launches them, with the split count decode_splits() chooses for the
// device's multiprocessors. Warm-up, then the median of --repeats timed runs (cudaEvent);
// the copy likewise.
//
// Usage: cuda_decode_bandwidth [--batch N] [--context N] [--kv-heads N] [--q-heads N]
//                              [--head-dim N] [--page-size N] [--repeats N] [--warmup N]
// The last line, "summary: ...", is what scripts/gpu-check.sh reads.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/paged_decode.cuh"

namespace {

using namespace kvfuzz::cuda;

// Any CUDA error ends the benchmark with the call that failed: a number measured after
// an error would mean nothing.
#define CHECK(call)                                                                 \
  do {                                                                              \
    const cudaError_t status_ = (call);                                             \
    if (status_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "cuda_decode_bandwidth: %s failed: %s (%s:%d)\n", #call, \
                   cudaGetErrorString(status_), __FILE__, __LINE__);                \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Options {
  int batch = 64, context = 4096, kv_heads = 8, q_heads = 32, head_dim = 128, page_size = 16;
  int repeats = 20, warmup = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  struct Flag {
    const char* name;
    int* value;
  } flags[] = {{"--batch", &o.batch},       {"--context", &o.context},
               {"--kv-heads", &o.kv_heads}, {"--q-heads", &o.q_heads},
               {"--head-dim", &o.head_dim}, {"--page-size", &o.page_size},
               {"--repeats", &o.repeats},   {"--warmup", &o.warmup}};
  for (int i = 1; i < argc; ++i) {
    bool known = false;
    for (Flag& f : flags) {
      if (std::strcmp(argv[i], f.name) != 0) continue;
      char* end = nullptr;
      const long v = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || *end != '\0' || v < (f.value == &o.warmup ? 0 : 1) || v > (1 << 24)) {
        std::fprintf(stderr, "cuda_decode_bandwidth: %s takes an integer from 1 (--warmup: 0)\n",
                     f.name);
        std::exit(2);
      }
      *f.value = static_cast<int>(v);
      known = true;
      ++i;
      break;
    }
    if (!known) {
      std::fprintf(stderr, "cuda_decode_bandwidth: unknown argument '%s' (see the file's header)\n",
                   argv[i]);
      std::exit(2);
    }
  }
  if (o.q_heads % o.kv_heads != 0 || o.context % o.page_size != 0) {
    std::fprintf(stderr,
                 "cuda_decode_bandwidth: q heads must be a multiple of kv heads and "
                 "the context a multiple of the page size\n");
    std::exit(2);
  }
  return o;
}

// Element i of the pool: a value in [-1, 1) from a hash of i, stored in bf16 as append_kv
// would store a key (any finite data will do; the timing does not depend on it).
__global__ void fill_pool(void* pool, long long elements, unsigned salt) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements;
       i += stride) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    store_element(pool, i, static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f, kStorageBf16);
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

// Milliseconds of each of `repeats` runs of `body` after `warmup` untimed ones.
template <class Body>
std::vector<float> time_runs(int warmup, int repeats, Body body) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) body();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < repeats; ++i) {
    CHECK(cudaEventRecord(start));
    body();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms;
}

template <class T>
T* device_array(size_t count) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, count * sizeof(T)));
  return static_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  const int pages_per_seq = o.context / o.page_size;
  const long long pages = static_cast<long long>(o.batch) * pages_per_seq;
  const long long slot_elements = static_cast<long long>(o.kv_heads) * o.head_dim;
  const long long pool_elements = pages * o.page_size * slot_elements;  // K, and V alike
  const size_t pool_bytes = static_cast<size_t>(pool_elements) * sizeof(unsigned short);  // bf16
  // Every key and value of every row is visible (no window, full contexts): the decode
  // reads both pools whole, once per (row, kv head).
  const size_t kv_bytes = 2 * pool_bytes;

  std::printf("device: %s (%d SMs, %.0f GiB)\n", prop.name, sms,
              static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  std::printf(
      "cache: batch %d x context %d, %d kv heads, %d q heads, head_dim %d, bf16, "
      "pages of %d tokens, block tables shuffled\n",
      o.batch, o.context, o.kv_heads, o.q_heads, o.head_dim, o.page_size);

  // The pools, filled on the device.
  void* k_pool = device_array<unsigned short>(static_cast<size_t>(pool_elements));
  void* v_pool = device_array<unsigned short>(static_cast<size_t>(pool_elements));
  fill_pool<<<4 * sms, 256>>>(k_pool, pool_elements, 0x9e3779b9u);
  fill_pool<<<4 * sms, 256>>>(v_pool, pool_elements, 0x7f4a7c15u);
  CHECK(cudaGetLastError());

  // Block tables: every page of the pool once, in a shuffled order.
  std::vector<int> tables(static_cast<size_t>(pages));
  std::iota(tables.begin(), tables.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(tables.begin(), tables.end(), rng);
  std::vector<int> batch_seq(static_cast<size_t>(o.batch)), lengths(static_cast<size_t>(o.batch));
  std::iota(batch_seq.begin(), batch_seq.end(), 0);
  std::fill(lengths.begin(), lengths.end(), o.context);
  std::vector<float> q(static_cast<size_t>(o.batch) * o.q_heads * o.head_dim);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& x : q) x = uniform(rng);

  int* d_tables = device_array<int>(tables.size());
  int* d_batch_seq = device_array<int>(batch_seq.size());
  int* d_lengths = device_array<int>(lengths.size());
  float* d_q = device_array<float>(q.size());
  CHECK(cudaMemcpy(d_tables, tables.data(), tables.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_batch_seq, batch_seq.data(), batch_seq.size() * sizeof(int),
                   cudaMemcpyHostToDevice));
  CHECK(
      cudaMemcpy(d_lengths, lengths.data(), lengths.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_q, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice));

  DecodeArgs a;
  a.kv = {.k = k_pool,
          .v = v_pool,
          .dtype = kStorageBf16,
          .block_tables = d_tables,
          .max_pages = pages_per_seq,
          .page_size = o.page_size,
          .kv_heads = o.kv_heads,
          .head_dim = o.head_dim,
          .value_dim = o.head_dim};
  a.batch_seq = d_batch_seq;
  a.q = d_q;
  a.lengths = d_lengths;
  a.q_heads = o.q_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
  // As cuda-paged-bf16 computes: P and rows rounded to bf16.
  a.p_dtype = kStorageBf16;
  a.out_dtype = kStorageBf16;
  decode_splits(o.batch, o.kv_heads, o.context, sms, a.splits, a.keys_per_split);
  const size_t heads = static_cast<size_t>(o.batch) * o.q_heads;
  const size_t parts = heads * static_cast<size_t>(a.splits);
  a.partial_out = device_array<float>(parts * o.head_dim);
  a.partial_max = device_array<float>(parts);
  a.partial_sum = device_array<float>(parts);
  a.out = device_array<float>(heads * o.head_dim);
  const dim3 split_grid = decode_split_grid(o.batch, o.q_heads, o.kv_heads, a.splits);
  const dim3 merge_grid = decode_merge_grid(o.batch, o.q_heads);
  std::printf(
      "splits: %d of %d keys (decode_splits for %d SMs); grids (%u, %u, %u) x %d "
      "threads and (%u, %u) x 32\n",
      a.splits, a.keys_per_split, sms, split_grid.x, split_grid.y, split_grid.z, kDecodeThreads,
      merge_grid.x, merge_grid.y);

  const auto decode = [&] {
    KVFUZZ_LAUNCH(paged_decode_split, split_grid, dim3(kDecodeThreads), 0, a);
    KVFUZZ_LAUNCH(paged_decode_merge, merge_grid, dim3(kDecodeMergeThreads), 0, a);
  };
  const std::vector<float> decode_ms = time_runs(o.warmup, o.repeats, decode);
  CHECK(cudaGetLastError());

  // A sanity check of what was timed: every output finite (a launch that did nothing, or
  // read outside the pool, would show here before its time is believed).
  std::vector<float> out(heads * o.head_dim);
  CHECK(cudaMemcpy(out.data(), a.out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const auto bad = std::count_if(out.begin(), out.end(), [](float x) { return !std::isfinite(x); });
  if (bad != 0) {
    std::fprintf(stderr, "cuda_decode_bandwidth: %lld of %zu outputs are not finite\n",
                 static_cast<long long>(bad), out.size());
    return 1;
  }

  // The yardstick: a device-to-device copy of the same byte count (both pools into one
  // buffer), which reads each byte once and writes it once.
  void* copy_dst = device_array<unsigned char>(kv_bytes);
  const auto copy = [&] {
    CHECK(cudaMemcpyAsync(copy_dst, k_pool, pool_bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(copy_dst) + pool_bytes, v_pool, pool_bytes,
                          cudaMemcpyDeviceToDevice));
  };
  const std::vector<float> copy_ms = time_runs(o.warmup, o.repeats, copy);

  const double t_decode = median(decode_ms), t_copy = median(copy_ms);
  const double bytes = static_cast<double>(kv_bytes);
  const double decode_gbps = bytes / (t_decode * 1e-3) / 1e9;
  const double copied_gbps = bytes / (t_copy * 1e-3) / 1e9;
  // The copy moves each byte twice (read and write): its DRAM traffic is the device's
  // achievable bandwidth, what a kernel that only reads can at best approach.
  const double copy_traffic_gbps = 2 * copied_gbps;
  const double ratio = decode_gbps / copy_traffic_gbps;
  std::printf("K/V read per decode: %zu bytes (%.2f GiB)\n", kv_bytes,
              bytes / static_cast<double>(1u << 30));
  std::printf(
      "decode (split + merge): median %.3f ms of %d runs (min %.3f, max %.3f): %.1f GB/s "
      "of K/V read\n",
      t_decode, o.repeats, *std::min_element(decode_ms.begin(), decode_ms.end()),
      *std::max_element(decode_ms.begin(), decode_ms.end()), decode_gbps);
  std::printf(
      "device-to-device copy of the same bytes: median %.3f ms: %.1f GB/s copied, "
      "%.1f GB/s read + written\n",
      t_copy, copied_gbps, copy_traffic_gbps);
  std::printf("ratio: decode reads at %.2f of the copy's read + write bandwidth\n", ratio);
  std::printf("summary: device=\"%s\" decode_ms=%.3f decode_gbps=%.1f copy_gbps=%.1f ratio=%.2f\n",
              prop.name, t_decode, decode_gbps, copy_traffic_gbps, ratio);

  CHECK(cudaFree(copy_dst));
  CHECK(cudaFree(a.out));
  CHECK(cudaFree(a.partial_sum));
  CHECK(cudaFree(a.partial_max));
  CHECK(cudaFree(a.partial_out));
  CHECK(cudaFree(d_q));
  CHECK(cudaFree(d_lengths));
  CHECK(cudaFree(d_batch_seq));
  CHECK(cudaFree(d_tables));
  CHECK(cudaFree(v_pool));
  CHECK(cudaFree(k_pool));
  return 0;
}
