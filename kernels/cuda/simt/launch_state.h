// The launcher's state of one block under way, shared by its two files: launcher.cpp (the
// fibers, barriers, warp operations and the schedule) and shared_races.cpp (the race
// check's shadow state). Not part of the launcher's interface (simt.h).
#pragma once

#include <boost/context/detail/fcontext.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "cuda/simt/simt.h"

namespace kvfuzz::simt::state {

namespace fcontext = boost::context::detail;

enum class Wait { none, block_barrier, warp_op, done };

struct Fiber {
  fcontext::fcontext_t context = nullptr;
  char* stack = nullptr;  // one of the thread's stacks (fiber_stacks)
  ThreadCoordinates where;
  int linear = 0;
  int position = 0;  // in the block's order (Block::order)
  Wait wait = Wait::none;
  uint64_t generation = 0;  // of the barrier or warp operation it waits at
  const char* op = "";      // the warp operation it waits at
  unsigned mask = 0;
  int from = 0;             // the lane whose value it takes at that warp operation
  size_t shared_calls = 0;  // shared_bytes() calls so far
  void* fake_stack = nullptr;
  // What the warp operation it waited at gave, set when the last lane arrived, so that
  // lanes already past it cannot overwrite what slower lanes still read.
  detail::WarpResult result{};
  // The warp's count of completed operations at the last one this lane took part in: what
  // orders its accesses after those its warp's lanes made before that operation.
  uint64_t synced = 0;
};

// A warp operation under way: the values offered so far, and the mask and name the first
// lane to arrive gave (every other lane must give the same).
struct WarpState {
  uint64_t values[kWarpSize]{};
  unsigned ballot = 0;
  unsigned arrived = 0;
  unsigned mask = 0;
  const char* op = nullptr;
  int first_lane = 0;
  uint64_t generation = 0;
  uint64_t completed = 0;  // operations completed, this block
};

// A static shared array as placed: what a race report calls the bytes it names.
struct SharedArray {
  size_t offset = 0, bytes = 0;
  const char* name = "";
};

struct Block {
  const char* name = "";
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<int> order;       // fibers' indices in the order a pass resumes them
  bool in_thread_order = true;  // order[i] == i
  std::vector<WarpState> warps;
  Schedule schedule;
  Checks checks;
  uint64_t block_linear = 0;  // the block's index in the grid
  uint64_t passes = 0;        // scheduler passes over this block so far
  // The block's shared memory: the launch's dynamic bytes first, then each static array
  // where its first call placed it.
  unsigned char* shared = nullptr;  // the thread's (block_shared_memory), kMaxSharedBytes
  size_t dynamic_bytes = 0;
  const char* dynamic_name = "extern shared";
  std::vector<SharedArray> shared_arrays;  // per shared_bytes() call, in call order
  size_t shared_used = 0;
  int barrier_arrived = 0;
  uint64_t barrier_generation = 0;
  // The call site the first thread to reach the barrier under way came from, and that thread.
  Site barrier_site;
  int barrier_first = 0;
  // The span between two barriers of this block (a new one at each completed barrier and
  // each new block, counted on from launch to launch): accesses in different epochs are
  // ordered by a barrier.
  uint32_t epoch = 0;
  fcontext::fcontext_t scheduler = nullptr;  // where the running fiber switches back to
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
  Fiber* running = nullptr;
  std::exception_ptr error;
};

// The block the calling thread runs (nullptr outside a launch).
extern thread_local Block* t_block;

[[noreturn]] void outside_a_launch();

// The running block; throws LaunchError outside a launch.
inline Block& block() {
  if (t_block == nullptr || t_block->running == nullptr) [[unlikely]]
    outside_a_launch();
  return *t_block;
}

// "KERNEL block (x,y,z) thread (x,y,z)", and "thread (x,y,z)" alone.
std::string who(const Block& b, const Fiber& f);
std::string thread_text(const Fiber& f);
// "file.cuh:123" (the file's name without its folders).
std::string site_text(const Site& site);

// The first epoch of a block about to start, and a new epoch after a barrier: counted on
// from the calling thread's last (shadow state from earlier epochs,
// blocks and launches is then stale without being cleared).
uint32_t block_epoch();
uint32_t next_epoch();

}  // namespace kvfuzz::simt::state
