// The SIMT launcher: CUDA kernels' source run on the CPU, a test double for the device (not
// a model of its timing). A launch runs the grid's blocks one after another on the calling
// thread; each block's threads are fibers (Boost.Context, annotated for AddressSanitizer) that
// run until they finish or wait: at __syncthreads (a barrier over the block) or at a warp
// operation (shuffles, votes, __syncwarp: a barrier over the lanes of its mask). So a kernel
// sees what it would see on a device whose threads interleave only at those points, and a
// missing barrier shows: each launch fills the block's shared memory with poison (NaN
// bytes), and a thread that reads a tile before the threads that write it ran reads poison.
//
// Which thread runs first after a wait is the Schedule's (thread order, reversed, warps
// interleaved lane by lane, a seeded random order per pass, or a warp run ahead to its next
// barrier): an honest kernel gives the same bits under every one, a racy one may not.
//
// Checked, each a LaunchError naming the kernel, block and thread: a warp operation whose
// mask leaves out the calling lane or the lane it reads, lanes of one mask that disagree on
// it, a width that is not a power of two up to 32, a __syncthreads some threads of the
// block never reach (they finished, or wait elsewhere), and shared memory past a block's
// 227 KiB (sm_90's). And, as compute-sanitizer's racecheck and synccheck do on a device,
// two hazards a launch may get right by the luck of its order (a HazardError, Checks):
//   race                two threads touch one shared-memory word between the same two
//                       barriers, at least one writing (read after write, write after
//                       read, or write after write of different bits), and no barrier
//                       orders them: threads of different warps, or lanes of one warp with
//                       no warp operation of theirs in between; and a read of a word no
//                       thread of the block has written yet (its writer has not run, or it
//                       is uninitialized), stopped before the poison read is used;
//   barrier-divergence  the threads of a block meet at __syncthreads from different call
//                       sites (a barrier in both branches of an `if`, or skipped on one
//                       path and met at the next): undefined behaviour on a device.
//
// What kernels see (kernels/cuda/cuda_compat.h maps CUDA's names onto these): threadIdx,
// blockIdx, blockDim, gridDim; __syncthreads; __syncwarp, __shfl_sync, __shfl_xor_sync,
// __shfl_down_sync, __ballot_sync, __any_sync, __all_sync, and a warp reduction's xor
// butterfly as one operation (butterfly(); cuda_compat.h's xor_butterfly); static shared arrays by
// shared_array<T>(n), the same address for the same call in every thread of a block, and
// the launch's dynamic shared memory by dynamic_shared_array<T>(); Shared<T>, the pointer
// into shared memory through which every access is checked for races.
//
// Under AddressSanitizer every fiber switch is announced to it.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kvfuzz/thread_schedule.h"

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

// A hazard found by the checks (see above): what a device may or may not get wrong.
enum class Hazard { race, barrier_divergence };
class HazardError : public LaunchError {
 public:
  HazardError(Hazard kind, const std::string& what) : LaunchError(what), hazard(kind) {}
  Hazard hazard;
};

// Where in a kernel's source an access or a barrier is: reports name both sides of a hazard.
// Filled by __builtin_FILE and __builtin_LINE as default arguments, which both GCC and
// clang (14, the sanitize preset's, has no std::source_location; GCC 12 no
// __builtin_COLUMN) evaluate where the call is.
struct Site {
  const char* file = "";
  unsigned line = 0;
  const char* file_name() const { return file; }
};

// The order in which a block's threads run again after a wait (kvfuzz/thread_schedule.h):
// each pass over the block resumes, in this order, every thread whose wait is over.
using ThreadOrder = ::kvfuzz::ThreadOrder;
using Schedule = ::kvfuzz::ThreadSchedule;

// Which hazards a launch looks for. Both by default; the environment variable
// KVFUZZ_SIMT_CHECKS=none turns them off for the process (to measure what they cost).
struct Checks {
  bool races = true;
  bool barriers = true;
};
Checks default_checks();

// The calling thread's launches run with `schedule` and `checks` while this lives (then
// as before it): what an engine sets around the launches of one step.
class LaunchSettings {
 public:
  LaunchSettings(Schedule schedule, Checks checks);
  // `schedule` with the checks of the enclosing settings (a test's), else default_checks().
  explicit LaunchSettings(Schedule schedule);
  ~LaunchSettings();
  LaunchSettings(const LaunchSettings&) = delete;
  LaunchSettings& operator=(const LaunchSettings&) = delete;

  Schedule schedule() const { return schedule_; }
  Checks checks() const { return checks_; }
  // The innermost settings alive on the calling thread; nullptr when none.
  static const LaunchSettings* current() { return t_settings_slot(); }

 private:
  static const LaunchSettings*& t_settings_slot();
  Schedule schedule_;
  Checks checks_;
  const LaunchSettings* previous_ = nullptr;
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

// __syncthreads, called from `file`:`line` (the caller's, by default). Barriers are told
// apart by file and line: two on one line count as one.
void sync_block(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE());
// __syncwarp(mask): the lanes of `mask` wait for one another.
void sync_warp(unsigned mask);

// A static shared array (__shared__ T name[n]): the n-th call of a thread gets the same
// bytes as the n-th call of every other thread of its block, aligned to `align`, poisoned
// when the block starts. `name` is what a race report calls it.
void* shared_bytes(size_t bytes, size_t align, const char* name = "shared");
template <class T>
T* shared_array(size_t n, const char* name = "shared") {
  return static_cast<T*>(shared_bytes(n * sizeof(T), alignof(T), name));
}
// The launch's dynamic shared memory (extern __shared__), poisoned when the block starts.
void* dynamic_shared(const char* name = "extern shared");
template <class T>
T* dynamic_shared_array(const char* name = "extern shared") {
  return static_cast<T*>(dynamic_shared(name));
}

namespace detail {
// Which lane of its width segment a lane reads at a shuffle: lane `arg` (__shfl_sync), its
// own lane XOR `arg` (__shfl_xor_sync), its own lane + `arg` (__shfl_down_sync); a source
// outside the segment reads the caller's own value, as CUDA's shuffles do. A vote reads
// its own lane.
// A butterfly reads lane XOR offset for each offset from width / 2 down to 1 (butterfly()).
enum class Source { lane, lane_xor, lane_down, own, butterfly };
// What a butterfly does at each step: op(its own value, the value of lane XOR offset).
using Combine = uint64_t (*)(uint64_t own, uint64_t other);
struct WarpResult {
  uint64_t value;   // the source lane's value
  unsigned ballot;  // the lanes of the mask whose value was not 0
};
// One warp operation: every lane in `mask` (the caller among them) offers `value`; once
// all have, each gets its source lane's value and the ballot (a butterfly: what `combine`
// made of its value over the steps).
WarpResult warp_exchange(const char* what, unsigned mask, uint64_t value, int width, Source source,
                         int arg, Combine combine = nullptr);

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
template <class T, class Op>
uint64_t combine_bits(uint64_t own, uint64_t other) {
  return to_bits(Op{}(from_bits<T>(own), from_bits<T>(other)));
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

// The xor butterfly that warp reductions are written as,
//   for (int offset = width / 2; offset > 0; offset /= 2)
//     x = op(x, __shfl_xor_sync(mask, x, offset, width));
// as one warp operation: every lane gets, bit for bit, what those log2(width) shuffles give
// it (the same op on the same operands in the same order), with one wait instead of
// log2(width): a fiber switch per lane per shuffle was most of the launcher's time. `Op` is
// a stateless function object (a captureless lambda's type).
template <class T, class Op>
T butterfly(unsigned mask, T x, int width, Op) {
  static_assert(std::is_empty_v<Op> && std::is_default_constructible_v<Op>);
  // Its own name: lanes of one warp at a butterfly and at a lone shuffle are a misuse.
  return detail::from_bits<T>(
      detail::warp_exchange("__shfl_xor_sync (butterfly)", mask, detail::to_bits(x), width,
                            detail::Source::butterfly, 0, &detail::combine_bits<T, Op>)
          .value);
}

}  // namespace kvfuzz::simt

#include "cuda/simt/shared.h"  // IWYU pragma: export
