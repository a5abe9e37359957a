// The SIMT launcher (simt.h): a block's threads as fibers on the calling thread (Boost.Context's
// fcontext: a switch is a few instructions, where ucontext's swapcontext made a
// sigprocmask system call, 1.1 million of them per generated case of the CUDA engines),
// switched only where a thread finishes or waits. The scheduler resumes, in the Schedule's
// order, every fiber whose wait is over, until all finished; when none can go on, the
// threads that still wait are a divergent barrier, and the launch fails naming them. The
// race check's shadow state is in shared_races.cpp.
#include <algorithm>
#include <bit>
#include <boost/context/detail/fcontext.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <vector>

#include "cuda/simt/launch_state.h"
#include "cuda/simt/simt.h"
#include "kvfuzz/prng.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVFUZZ_SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KVFUZZ_SIMT_ASAN 1
#endif
#ifdef KVFUZZ_SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace kvfuzz::simt {

namespace state {

thread_local Block* t_block = nullptr;

[[noreturn]] void outside_a_launch() {
  throw LaunchError("simt: a device function was called outside a launch");
}

std::string thread_text(const Fiber& f) {
  const dim3& t = f.where.thread_idx;
  return "thread (" + std::to_string(t.x) + "," + std::to_string(t.y) + "," + std::to_string(t.z) +
         ")";
}

std::string who(const Block& b, const Fiber& f) {
  const dim3& c = f.where.block_idx;
  return std::string(b.name) + " block (" + std::to_string(c.x) + "," + std::to_string(c.y) + "," +
         std::to_string(c.z) + ") " + thread_text(f);
}

std::string site_text(const Site& site) {
  const char* file = site.file_name();
  const char* slash = std::strrchr(file, '/');
  return std::string(slash != nullptr ? slash + 1 : file) + ":" + std::to_string(site.line);
}

namespace {
thread_local uint32_t t_epochs = 0;
}  // namespace

uint32_t block_epoch() {
  // Far from wrapping at every block start, where no word is written yet: a block would
  // need 2^28 barriers to wrap inside it, and next_epoch() refuses that.
  if (t_epochs >= 0xF0000000u) {
    detail::clear_shadow();
    t_epochs = 0;
  }
  return ++t_epochs;
}

uint32_t next_epoch() {
  if (t_epochs == 0xFFFFFFFFu) {
    throw LaunchError("simt: more than 2^28 barriers in one block (the race check's epochs)");
  }
  return ++t_epochs;
}

}  // namespace state

namespace {

using namespace state;  // NOLINT: this file is the launcher's state's other half

// ASan keeps fake stacks and stack bounds per stack: every switch is announced to it.
void start_switch(void** fake_stack, const void* bottom, size_t size) {
#ifdef KVFUZZ_SIMT_ASAN
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}
// `from_bottom` and `from_size` (when given) receive the bounds of the stack switched from:
// a fiber learns the scheduler's stack so, to announce its switches back.
void finish_switch(void* fake_stack, const void** from_bottom = nullptr,
                   size_t* from_size = nullptr) {
#ifdef KVFUZZ_SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, from_bottom, from_size);
#else
  (void)fake_stack, (void)from_bottom, (void)from_size;
#endif
}

#ifdef KVFUZZ_SIMT_ASAN
constexpr size_t kStackBytes = size_t{1} << 20;  // ASan's redzones take room
#else
constexpr size_t kStackBytes = size_t{256} << 10;
#endif

// The calling thread's shared memory, kept from launch to launch (poisoned per block).
unsigned char* block_shared_memory() {
  thread_local std::unique_ptr<unsigned char[]> bytes(new unsigned char[kMaxSharedBytes]);
  return bytes.get();
}

// The calling thread's fiber stacks, kept from launch to launch: allocating (and zeroing)
// a stack per fiber per launch cost more than the kernels themselves.
char* fiber_stack(size_t index) {
  thread_local std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= index) stacks.emplace_back(new char[kStackBytes]);
  return stacks[index].get();
}

// Whether `f` may go on: its barrier or warp operation completed since it arrived.
bool released(const Block& b, const Fiber& f) {
  switch (f.wait) {
    case Wait::none:
      return true;
    case Wait::block_barrier:
      return b.barrier_generation != f.generation;
    case Wait::warp_op:
      return b.warps[static_cast<size_t>(f.linear / kWarpSize)].generation != f.generation;
    case Wait::done:
      return false;
  }
  return false;
}

// The first fiber from position `first` on, in the block's order, that may go on; nullptr
// when none.
Fiber* next_released(Block& b, size_t first) {
  const size_t n = b.fibers.size();
  if (b.in_thread_order) {  // position = thread: no indirection on the common path
    for (size_t i = first; i < n; ++i) {
      Fiber& f = b.fibers[i];
      if (f.wait != Wait::done && released(b, f)) return &f;
    }
    return nullptr;
  }
  for (size_t i = first; i < n; ++i) {
    Fiber& f = b.fibers[static_cast<size_t>(b.order[i])];
    if (f.wait != Wait::done && released(b, f)) return &f;
  }
  return nullptr;
}

// The fiber to run after `self` waits: under warp_ahead a lane of its own warp that may go
// on (its warp operation completed), else the next one after it in the block's order.
Fiber* next_after(Block& b, const Fiber& self) {
  if (b.schedule.order == ThreadOrder::warp_ahead) {
    const size_t first = static_cast<size_t>(self.linear / kWarpSize * kWarpSize);
    const size_t end = std::min(first + kWarpSize, b.fibers.size());
    for (size_t i = first; i < end; ++i) {
      Fiber& f = b.fibers[i];
      if (&f != &self && f.wait != Wait::done && released(b, f)) return &f;
    }
  }
  return next_released(b, static_cast<size_t>(self.position) + 1);
}

// The order of the pass about to start (the schedule's; random draws one per pass).
void order_pass(Block& b) {
  const size_t n = b.fibers.size();
  const size_t warps = (n + kWarpSize - 1) / kWarpSize;
  const bool first_pass = b.passes++ == 0;
  if (!first_pass && b.schedule.order != ThreadOrder::random) return;
  b.order.clear();
  switch (b.schedule.order) {
    case ThreadOrder::thread:
    case ThreadOrder::warp_ahead:
      for (size_t t = 0; t < n; ++t) b.order.push_back(static_cast<int>(t));
      break;
    case ThreadOrder::reversed:
      for (size_t t = n; t-- > 0;) b.order.push_back(static_cast<int>(t));
      break;
    case ThreadOrder::warp_interleaved:
      for (size_t lane = 0; lane < kWarpSize; ++lane) {
        for (size_t w = 0; w < warps; ++w) {
          if (w * kWarpSize + lane < n) b.order.push_back(static_cast<int>(w * kWarpSize + lane));
        }
      }
      break;
    case ThreadOrder::random: {
      // The same order on every machine: splitmix64 of (seed, block, pass).
      uint64_t state = b.schedule.seed ^ (b.block_linear * 0xD1B54A32D192ED03ull) ^
                       (b.passes * 0x8CB92BA72F3D8DD7ull);
      std::vector<size_t> warp_order(warps);
      for (size_t w = 0; w < warps; ++w) warp_order[w] = w;
      for (size_t w = warps; w > 1; --w) {
        std::swap(warp_order[w - 1], warp_order[splitmix64(state) % w]);
      }
      for (const size_t w : warp_order) {
        const size_t first = w * kWarpSize, end = std::min(first + kWarpSize, n);
        if (splitmix64(state) & 1u) {
          for (size_t t = end; t-- > first;) b.order.push_back(static_cast<int>(t));
        } else {
          for (size_t t = first; t < end; ++t) b.order.push_back(static_cast<int>(t));
        }
      }
      break;
    }
  }
  for (size_t i = 0; i < n; ++i)
    b.fibers[static_cast<size_t>(b.order[i])].position = static_cast<int>(i);
  b.in_thread_order =
      b.schedule.order == ThreadOrder::thread || b.schedule.order == ThreadOrder::warp_ahead;
}

// What the race check's inline path knows of the thread about to run (shared.h). Its
// warp's count of completed operations is taken as of the last one it took part in: the
// same order for every operation of the full warp (a narrower mask may leave a race
// between lanes unseen, never make one up).
void set_running(const Fiber& f) {
  if (!detail::t_races.on) return;
  detail::t_races.thread = static_cast<int16_t>(f.linear);
  detail::t_races.warp_completed = static_cast<uint32_t>(f.synced);
}

// A switch hands the fiber (or scheduler) it resumes the slot where the context of the one
// it left goes: that context is known only once the jump is made.
void keep_context(fcontext::transfer_t from) {
  *static_cast<fcontext::fcontext_t*>(from.data) = from.fctx;
}

// The running fiber waits (or finished): on to the next fiber after it, in thread order,
// whose wait is over (the scheduler's pass goes on without a return to it: one jump per
// switch instead of two), or back to the scheduler at the end of a pass or after an error.
void leave(Block& b, bool finished) {
  Fiber& self = *b.running;
  Fiber* next = b.error ? nullptr : next_after(b, self);
  thread_local fcontext::fcontext_t finished_context;  // a finished fiber's: never resumed
  fcontext::fcontext_t* slot = finished ? &finished_context : &self.context;
  // A finished fiber's fake stack is released (nullptr): it never runs again.
  void** fake_stack = finished ? nullptr : &self.fake_stack;
  fcontext::fcontext_t to = nullptr;
  if (next != nullptr) {
    next->wait = Wait::none;
    b.running = next;
    set_running(*next);
    start_switch(fake_stack, next->stack, kStackBytes);
    to = next->context;
  } else {
    b.running = nullptr;
    start_switch(fake_stack, b.scheduler_bottom, b.scheduler_size);
    to = b.scheduler;
  }
  const fcontext::transfer_t from = fcontext::jump_fcontext(to, slot);
  // Resumed (a finished fiber never is), by the scheduler or by a fiber before it.
  finish_switch(self.fake_stack);
  keep_context(from);
}

void fiber_entry(fcontext::transfer_t from) {
  Block& b = *t_block;
  // The first fiber of a pass is started by the scheduler, whose stack it learns so.
  const void* bottom = nullptr;
  size_t size = 0;
  finish_switch(nullptr, &bottom, &size);
  if (from.data == &b.scheduler) {
    b.scheduler_bottom = bottom;
    b.scheduler_size = size;
  }
  keep_context(from);
  try {
    (*b.kernel)();
  } catch (...) {
    if (!b.error) b.error = std::current_exception();
  }
  b.running->wait = Wait::done;
  leave(b, true);
}

// Back to the scheduler or on to another fiber, until this one may go on.
void yield(Block& b) {
  leave(b, false);
}

// From the scheduler: runs `f` and, in turn, the fibers after it that may go on (leave()),
// until one of them switches back.
void resume(Block& b, Fiber& f) {
  f.wait = Wait::none;
  b.running = &f;
  set_running(f);
  start_switch(&b.scheduler_fake_stack, f.stack, kStackBytes);
  const fcontext::transfer_t from = fcontext::jump_fcontext(f.context, &b.scheduler);
  finish_switch(b.scheduler_fake_stack);
  keep_context(from);
  b.running = nullptr;
}

// 0xFF bytes: a NaN in f32, f64, f16 and bf16 alike, and -1 in integers.
void fill_poison(unsigned char* bytes, size_t n) {
  std::fill(bytes, bytes + n, static_cast<unsigned char>(0xFF));
}

#ifdef KVFUZZ_SIMT_ASAN
// Per fiber stack: whether a fiber was left on it mid-kernel (a launch that failed), so
// that its frames' poisoning may lie anywhere on it.
std::vector<char>& abandoned_stacks() {
  thread_local std::vector<char> abandoned;
  return abandoned;
}
// What a fiber that finished leaves poisoned: fiber_entry's frame (it never returns) near
// the top; the kernel's frames returned and cleaned up after themselves.
constexpr size_t kStackTopBytes = size_t{16} << 10;
#endif

// A fresh context on the fiber's stack (fcontext takes the stack's top: it grows down).
void make_fiber_context(Fiber& f, size_t index) {
#ifdef KVFUZZ_SIMT_ASAN
  // A reused stack still carries the scope poisoning the last fiber on it left, which
  // ucontext's interceptor cleared and fcontext does not: its top, or all of it after a
  // failed launch (unpoisoning the whole 1 MiB for every fiber was two thirds of the CUDA
  // engines' time under ASan).
  std::vector<char>& abandoned = abandoned_stacks();
  if (abandoned.size() <= index) abandoned.resize(index + 1, 1);
  const size_t clean = abandoned[index] ? kStackBytes : kStackTopBytes;
  __asan_unpoison_memory_region(f.stack + kStackBytes - clean, clean);
  abandoned[index] = 0;
#else
  (void)index;
#endif
  f.context = fcontext::make_fcontext(f.stack + kStackBytes, kStackBytes, fiber_entry);
}

// Passes over the block's fibers in the schedule's order (each a chain of switches, leave())
// until all finished; when none can go on, the threads that still wait are a divergent
// barrier.
void run_block(Block& b) {
  for (;;) {
    order_pass(b);
    Fiber* first = next_released(b, 0);
    if (first == nullptr) break;
    resume(b, *first);
    if (b.error) return;
  }
  for (const Fiber& f : b.fibers) {
    if (f.wait == Wait::block_barrier) {
      throw LaunchError(who(b, f) +
                        ": waits at __syncthreads that other threads of its "
                        "block never reach");
    }
    if (f.wait == Wait::warp_op) {
      throw LaunchError(who(b, f) + ": waits at " + f.op +
                        " for lanes of its mask that never reach it");
    }
  }
}

}  // namespace

Checks default_checks() {
  static const Checks checks = [] {
    const char* text = std::getenv("KVFUZZ_SIMT_CHECKS");
    const std::string value = text != nullptr ? text : "all";
    if (value == "all") return Checks{};
    if (value == "none") return Checks{false, false};
    if (value == "races") return Checks{true, false};
    if (value == "barriers") return Checks{false, true};
    throw LaunchError("KVFUZZ_SIMT_CHECKS=" + value + ": expected all, none, races or barriers");
  }();
  return checks;
}

LaunchSettings::LaunchSettings(Schedule schedule, Checks checks)
    : schedule_(schedule), checks_(checks) {
  previous_ = t_settings_slot();
  t_settings_slot() = this;
}

LaunchSettings::LaunchSettings(Schedule schedule)
    : LaunchSettings(schedule, current() != nullptr ? current()->checks() : default_checks()) {}

LaunchSettings::~LaunchSettings() {
  t_settings_slot() = previous_;
}

const LaunchSettings*& LaunchSettings::t_settings_slot() {
  thread_local const LaunchSettings* current = nullptr;
  return current;
}

const ThreadCoordinates& coordinates() {
  return block().running->where;
}

void launch(const char* name, dim3 grid, dim3 block_dim, size_t shared_bytes_per_block,
            const std::function<void()>& kernel) {
  if (t_block != nullptr) throw LaunchError(std::string(name) + ": a launch inside a launch");
  const unsigned threads = block_dim.count();
  if (threads == 0 || threads > 1024 || grid.count() == 0) {
    throw LaunchError(std::string(name) + ": a launch of " + std::to_string(grid.count()) +
                      " blocks of " + std::to_string(threads) + " threads (1 to 1024 per block)");
  }
  Block b;
  b.name = name;
  b.kernel = &kernel;
  if (const LaunchSettings* settings = LaunchSettings::current()) {
    b.schedule = settings->schedule();
    b.checks = settings->checks();
  } else {
    b.checks = default_checks();
  }
  b.fibers.resize(threads);
  for (size_t i = 0; i < b.fibers.size(); ++i) b.fibers[i].stack = fiber_stack(i);
  b.warps.resize((threads + kWarpSize - 1) / kWarpSize);
  if (shared_bytes_per_block > kMaxSharedBytes) {
    throw LaunchError(std::string(name) + ": " + std::to_string(shared_bytes_per_block) +
                      " bytes of dynamic shared memory, more than the " +
                      std::to_string(kMaxSharedBytes) + " a block has");
  }
  b.shared = block_shared_memory();
  b.dynamic_bytes = shared_bytes_per_block;
  struct Reset {
    ~Reset() {
      t_block = nullptr;
      detail::t_races.on = false;
    }
  } reset;
  t_block = &b;
  detail::t_races.on = b.checks.races;
  detail::t_races.base = b.shared;
  if (b.checks.races) {
    detail::t_races.words = detail::shadow_words();
    detail::t_races.sites = detail::shadow_sites();
  }
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        fill_poison(b.shared, b.dynamic_bytes);  // static arrays: when placed
        b.shared_arrays.clear();
        b.shared_used = b.dynamic_bytes;
        b.dynamic_name = "extern shared";
        b.barrier_arrived = 0;
        b.block_linear =
            bx + grid.x * (static_cast<uint64_t>(by) + grid.y * static_cast<uint64_t>(bz));
        b.passes = 0;
        b.epoch = block_epoch();
        detail::t_races.epoch = detail::t_races.block_epoch = b.epoch;
        for (WarpState& w : b.warps) w = WarpState{};
        for (unsigned t = 0; t < threads; ++t) {
          Fiber& f = b.fibers[t];
          f.where = {
              {t % block_dim.x, t / block_dim.x % block_dim.y, t / (block_dim.x * block_dim.y)},
              {bx, by, bz},
              block_dim,
              grid};
          f.linear = static_cast<int>(t);
          f.wait = Wait::none;
          f.shared_calls = 0;
          f.synced = 0;
          make_fiber_context(f, t);
        }
        bool finished = false;
        struct Abandon {  // a failed block leaves its fibers' frames on their stacks
          const bool& finished;
          size_t fibers;
          ~Abandon() {
#ifdef KVFUZZ_SIMT_ASAN
            if (!finished) std::fill_n(abandoned_stacks().begin(), fibers, char{1});
#endif
          }
        } abandon{finished, b.fibers.size()};
        run_block(b);
        if (b.error) std::rethrow_exception(b.error);
        finished = true;
      }
    }
  }
}

void sync_block(const char* file, unsigned line) {
  const Site site{file, line};
  Block& b = block();
  Fiber& f = *b.running;
  if (b.checks.barriers) {
    if (b.barrier_arrived == 0) {
      b.barrier_site = site;
      b.barrier_first = f.linear;
    } else if (site.line != b.barrier_site.line ||
               (site.file_name() != b.barrier_site.file_name() &&
                std::strcmp(site.file_name(), b.barrier_site.file_name()) != 0)) {
      const Fiber& first = b.fibers[static_cast<size_t>(b.barrier_first)];
      throw HazardError(Hazard::barrier_divergence,
                        "barrier-divergence: " + who(b, f) + " reaches __syncthreads at " +
                            site_text(site) + " while " + thread_text(first) +
                            " waits at the one at " + site_text(b.barrier_site) +
                            ": the threads of a block must meet at one barrier");
    }
  }
  f.generation = b.barrier_generation;
  f.wait = Wait::block_barrier;
  if (++b.barrier_arrived == static_cast<int>(b.fibers.size())) {
    b.barrier_arrived = 0;
    ++b.barrier_generation;  // every waiting thread, this one included, is released
    b.epoch = next_epoch();  // what comes after is ordered after all that came before
    detail::t_races.epoch = b.epoch;
  }
  yield(b);
}

void sync_warp(unsigned mask) {
  detail::warp_exchange("__syncwarp", mask, 0, kWarpSize, detail::Source::own, 0);
}

void* shared_bytes(size_t bytes, size_t align, const char* name) {
  Block& b = block();
  Fiber& f = *b.running;
  const size_t call = f.shared_calls++;
  if (call == b.shared_arrays.size()) {
    // The first thread to make this call places it; the others find it.
    const size_t offset = (b.shared_used + align - 1) / align * align;
    if (offset + bytes > kMaxSharedBytes) {
      throw LaunchError(who(b, f) + ": " + std::to_string(offset + bytes) +
                        " bytes of shared memory, more than the " +
                        std::to_string(kMaxSharedBytes) + " a block has");
    }
    fill_poison(b.shared + offset, bytes);
    b.shared_arrays.push_back(SharedArray{offset, bytes, name});
    b.shared_used = offset + bytes;
  }
  return b.shared + b.shared_arrays[call].offset;
}

void* dynamic_shared(const char* name) {
  Block& b = block();
  b.dynamic_name = name;
  return b.shared;
}

namespace detail {

namespace {

// A butterfly's steps over the values the lanes of `mask` offered, in place: each lane's value
// becomes what the shuffles would have given it.
void run_butterfly(uint64_t (&values)[kWarpSize], unsigned mask, int width, Combine combine) {
  for (int offset = width / 2; offset > 0; offset /= 2) {
    uint64_t next[kWarpSize];
    for (unsigned left = mask; left != 0; left &= left - 1) {
      const int l = std::countr_zero(left);
      next[l] = combine(values[l], values[l ^ offset]);
    }
    for (unsigned left = mask; left != 0; left &= left - 1) {
      values[std::countr_zero(left)] = next[std::countr_zero(left)];
    }
  }
}

}  // namespace

WarpResult warp_exchange(const char* what, unsigned mask, uint64_t value, int width, Source source,
                         int arg, Combine combine) {
  Block& b = block();
  Fiber& f = *b.running;
  const int l = f.linear % kWarpSize;
  if (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0) {
    throw LaunchError(who(b, f) + ": " + what + " with width " + std::to_string(width) +
                      " (a power of two up to 32)");
  }
  // width is a power of two: masks instead of divisions (this runs once per lane per op).
  const int low = width - 1;
  const int in_segment = source == Source::lane        ? arg & low
                         : source == Source::lane_xor  ? (l & low) ^ arg
                         : source == Source::lane_down ? (l & low) + arg
                                                       : l & low;
  const int from = in_segment >= 0 && in_segment < width ? (l & ~low) + in_segment : l;
  const auto hex = [](unsigned bits) {
    char text[16];
    std::snprintf(text, sizeof text, "%08x", bits);
    return std::string(text);
  };
  if ((mask >> l & 1u) == 0) {
    throw LaunchError(who(b, f) + ": " + what + " with mask 0x" + hex(mask) +
                      ", which leaves out its own lane " + std::to_string(l));
  }
  const auto reads_outside = [&](int read) {
    return LaunchError(std::string(what) + ": lane " + std::to_string(l) + " reads lane " +
                       std::to_string(read) + ", which its mask leaves out");
  };
  if ((mask >> from & 1u) == 0) throw reads_outside(from);
  if (source == Source::butterfly) {  // lane XOR offset, for each offset (width is the segment)
    for (int offset = width / 2; offset > 0; offset /= 2) {
      if ((mask >> (l ^ offset) & 1u) == 0) throw reads_outside(l ^ offset);
    }
  }
  // Lanes past the block's last thread do not exist: a mask naming them never completes.
  const size_t warp = static_cast<size_t>(f.linear / kWarpSize);
  WarpState& w = b.warps[warp];
  if (w.arrived == 0) {
    w.mask = mask;
    w.op = what;
    w.first_lane = l;
  } else if (w.mask != mask || w.op != what) {
    // Every lane waiting at this operation gave the first one's mask and name.
    throw LaunchError(who(b, f) + ": " + what + " with mask 0x" + std::to_string(mask) +
                      " while lane " + std::to_string(w.first_lane) + " waits at " + w.op +
                      " with mask 0x" + std::to_string(w.mask));
  }
  w.values[l] = value;
  if (value != 0) w.ballot |= 1u << l;
  w.arrived |= 1u << l;
  f.op = what;
  f.mask = mask;
  f.from = from;
  f.generation = w.generation;
  f.wait = Wait::warp_op;
  if (w.arrived == mask) {
    Fiber* lanes = b.fibers.data() + warp * kWarpSize;
    const uint64_t completed = ++w.completed;
    if (source == Source::butterfly) run_butterfly(w.values, mask, width, combine);
    for (unsigned left = mask; left != 0; left &= left - 1) {
      Fiber& arrived = lanes[std::countr_zero(left)];
      arrived.result = WarpResult{w.values[arrived.from], w.ballot};
      arrived.synced = completed;
    }
    w.ballot = 0;
    w.arrived = 0;
    ++w.generation;
  }
  yield(b);
  return f.result;  // every lane of the mask offered its value
}

}  // namespace detail

unsigned ballot(unsigned mask, bool predicate) {
  return detail::warp_exchange("__ballot_sync", mask, predicate ? 1 : 0, kWarpSize,
                               detail::Source::own, 0)
             .ballot &
         mask;
}

}  // namespace kvfuzz::simt
