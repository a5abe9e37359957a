// The SIMT launcher: CUDA kernels' source run on the CPU, a test double for the device (not
// a model of its timing). A launch runs the grid's blocks one after another on the calling
// thread; each block's threads are fibers (Boost.Context, annotated for AddressSanitizer) that
// run until they finish or wait: at __syncthreads (a barrier over the block) or at a warp
// operation (shuffles, votes: a barrier over the lanes of its mask). So a kernel sees what
// it would see on a device whose threads interleave only at those points, and a missing
// barrier shows: each launch fills the block's shared memory with poison (NaN bytes), and
// a thread that reads a tile before the threads that write it ran reads poison.
//
// Checked, each a LaunchError naming the kernel, block and thread: a warp operation whose
// mask leaves out the calling lane or the lane it reads, lanes of one mask that disagree on
// it, a width that is not a power of two up to 32, a __syncthreads some threads of the
// block never reach (they finished, or wait elsewhere), and shared memory past a block's
// 227 KiB (sm_90's).
//
// What kernels see (kernels/cuda/cuda_compat.h maps CUDA's names onto these): threadIdx,
// blockIdx, blockDim, gridDim; __syncthreads; __shfl_sync, __shfl_xor_sync,
// __shfl_down_sync, __ballot_sync, __any_sync, __all_sync; static shared arrays by
// shared_array<T>(n), the same address for the same call in every thread of a block, and
// the launch's dynamic shared memory by dynamic_shared_array<T>().
//
// Under AddressSanitizer every fiber switch is announced to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kvfuzz::simt {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3() = default;
  constexpr dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr unsigned count() const { return x * y * z; }
};

constexpr int kWarpSize = 32;
// Shared memory one block may have, static and dynamic together: sm_90's 227 KiB.
constexpr size_t kMaxSharedBytes = 227 * 1024;

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The running thread's coordinates.
struct ThreadCoordinates {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadCoordinates& coordinates();

// Runs `kernel` on grid x block threads; `shared_bytes` of dynamic shared memory per block
// (extern __shared__), besides the static arrays the kernel places itself. Throws
// LaunchError (a check above, or the first exception a thread threw) after the block in
// which it happened.
void launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes,
            const std::function<void()>& kernel);

// __syncthreads.
void sync_block();

// A static shared array (__shared__ T name[n]): the n-th call of a thread gets the same
// bytes as the n-th call of every other thread of its block, aligned to `align`, poisoned
// when the block starts.
void* shared_bytes(size_t bytes, size_t align);
template <class T>
T* shared_array(size_t n) {
  return static_cast<T*>(shared_bytes(n * sizeof(T), alignof(T)));
}
// The launch's dynamic shared memory (extern __shared__), poisoned when the block starts.
void* dynamic_shared();
template <class T>
T* dynamic_shared_array() {
  return static_cast<T*>(dynamic_shared());
}

namespace detail {
// Which lane of its width segment a lane reads at a shuffle: lane `arg` (__shfl_sync), its
// own lane XOR `arg` (__shfl_xor_sync), its own lane + `arg` (__shfl_down_sync); a source
// outside the segment reads the caller's own value, as CUDA's shuffles do. A vote reads
// its own lane.
enum class Source { lane, lane_xor, lane_down, own };
struct WarpResult {
  uint64_t value;   // the source lane's value
  unsigned ballot;  // the lanes of the mask whose value was not 0
};
// One warp operation: every lane in `mask` (the caller among them) offers `value`; once
// all have, each gets its source lane's value and the ballot.
WarpResult warp_exchange(const char* what, unsigned mask, uint64_t value, int width, Source source,
                         int arg);

template <class T>
uint64_t to_bits(T value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}
template <class T>
T take(const char* what, unsigned mask, T value, int width, Source source, int arg) {
  return from_bits<T>(warp_exchange(what, mask, to_bits(value), width, source, arg).value);
}
}  // namespace detail

template <class T>
T shfl(unsigned mask, T value, int source_lane, int width = kWarpSize) {
  return detail::take("__shfl_sync", mask, value, width, detail::Source::lane, source_lane);
}
template <class T>
T shfl_xor(unsigned mask, T value, int lane_mask, int width = kWarpSize) {
  return detail::take("__shfl_xor_sync", mask, value, width, detail::Source::lane_xor, lane_mask);
}
template <class T>
T shfl_down(unsigned mask, T value, unsigned delta, int width = kWarpSize) {
  return detail::take("__shfl_down_sync", mask, value, width, detail::Source::lane_down,
                      static_cast<int>(delta));
}
unsigned ballot(unsigned mask, bool predicate);

}  // namespace kvfuzz::simt
