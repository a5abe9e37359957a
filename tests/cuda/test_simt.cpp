// The SIMT launcher (kernels/cuda/simt/simt.h): every thread of every block runs, barriers
// hold, warp operations give CUDA's values, shared memory starts as poison, and each misuse
// is a LaunchError naming the kernel, block and thread; each thread order runs the threads
// in its order; races and divergent barriers are HazardErrors naming both sides, and what
// orders two accesses (a barrier, a warp operation of both lanes) is no race.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/simt/simt.h"
#include "kvfuzz/prng.h"

namespace kvfuzz::simt {
namespace {

// The message of the LaunchError that `run` throws ("" if none).
template <class F>
std::string launch_error(F run) {
  try {
    run();
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Simt, EveryThreadOfEveryBlockRunsOnceWithItsCoordinates) {
  const dim3 grid(3, 2), block(4, 2, 2);
  std::vector<int> seen(grid.count() * block.count(), 0);
  launch("coordinates", grid, block, 0, [&] {
    const ThreadCoordinates& c = coordinates();
    EXPECT_EQ(c.block_dim.count(), 16u);
    EXPECT_EQ(c.grid_dim.count(), 6u);
    const unsigned t = c.thread_idx.x + 4 * (c.thread_idx.y + 2 * c.thread_idx.z);
    const unsigned b = c.block_idx.x + 3 * c.block_idx.y;
    ++seen[b * 16 + t];
  });
  EXPECT_EQ(seen, std::vector<int>(seen.size(), 1));
}

// A tile written by each thread, then read reversed: right with the barrier, poison
// (NaN) without it, because a thread that reads first finds its neighbours' slots unwritten.
TEST(Simt, ABarrierOrdersATileAndItsAbsenceReadsPoison) {
  for (const bool barrier : {true, false}) {
    std::vector<float> out(64);
    launch("reverse", dim3(1), dim3(64), 64 * sizeof(float), [&] {
      float* tile = dynamic_shared_array<float>();
      const unsigned t = coordinates().thread_idx.x;
      tile[t] = static_cast<float>(t);
      if (barrier) sync_block();
      out[t] = tile[63 - t];
    });
    for (unsigned t = 0; t < 64; ++t) {
      if (barrier) {
        EXPECT_EQ(out[t], static_cast<float>(63 - t)) << t;
      } else if (t < 32) {
        EXPECT_TRUE(std::isnan(out[t])) << t;  // read before thread 63 - t ran
      }
    }
  }
}

TEST(Simt, SharedMemoryIsPoisonedAtEveryBlockAndTheSameForEveryThread) {
  std::vector<float*> addresses(8);
  std::vector<float> first(2 * 8);
  launch("poison", dim3(2), dim3(8), 64, [&] {
    const ThreadCoordinates& c = coordinates();
    float* a = shared_array<float>(4);
    double* d = shared_array<double>(2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % alignof(double), 0u);
    addresses[c.thread_idx.x] = a;
    first[c.block_idx.x * 8 + c.thread_idx.x] = a[c.thread_idx.x % 4];
    sync_block();
    a[c.thread_idx.x % 4] = 1.0f;  // block 0 writes; block 1 must see poison again
  });
  for (float* a : addresses) EXPECT_EQ(a, addresses[0]);
  for (float x : first) EXPECT_TRUE(std::isnan(x));
  EXPECT_TRUE(contains(launch_error([] {
                         launch("too-much", dim3(1), dim3(1), 200000,
                                [] { shared_array<float>(10000); });
                       }),
                       "too-much block (0,0,0) thread (0,0,0): 240000 bytes of shared memory, "
                       "more than the 232448 a block has"));
  EXPECT_TRUE(
      contains(launch_error([] { launch("dynamic", dim3(1), dim3(1), 300000, [] {}); }),
               "dynamic: 300000 bytes of dynamic shared memory, more than the 232448 a block has"));
}

// A warp sum by xor shuffles: every lane gets the total; by down shuffles lane 0 does.
TEST(Simt, ShufflesGiveCudasValues) {
  std::vector<int> xor_sum(64), down_sum(64), broadcast(64), segment(64);
  launch("shuffles", dim3(1), dim3(64), 0, [&] {
    const int t = static_cast<int>(coordinates().thread_idx.x);
    int x = t, y = t;
    for (int offset = 16; offset > 0; offset /= 2) {
      x += shfl_xor(0xffffffffu, x, offset);
      y += shfl_down(0xffffffffu, y, static_cast<unsigned>(offset));
    }
    xor_sum[t] = x;
    down_sum[t] = y;
    broadcast[t] = shfl(0xffffffffu, t * 10, 3);
    segment[t] = shfl(0xffffffffu, t, 1, 8);  // lane 1 of each 8-lane segment
  });
  for (int t = 0; t < 64; ++t) {
    const int warp_total = (t / 32) * 32 * 32 + 31 * 32 / 2;
    EXPECT_EQ(xor_sum[t], warp_total) << t;
    EXPECT_EQ(broadcast[t], (t / 32 * 32 + 3) * 10) << t;
    EXPECT_EQ(segment[t], t / 8 * 8 + 1) << t;
  }
  EXPECT_EQ(down_sum[0], 31 * 32 / 2);
  EXPECT_EQ(down_sum[32], 32 * 32 + 31 * 32 / 2);
}

// A warp reduction's xor butterfly as one warp operation gives every lane the bits the
// shuffle loop gives it: float sums (whose order shows in the bits) and maxima, for every
// width (a narrower one reduces each segment alone), over random values of mixed
// magnitudes, which are such that another order (each warp summed left to right) gives other
// bits in some lane (asserted). Tried with the launcher's butterfly taking its offsets
// ascending (1, 2, 4, ...: another tree): 164 of the comparisons fail.
TEST(Simt, AButterflyGivesEachLaneTheBitsOfTheShuffleLoop) {
  const auto add = [](float own, float other) { return own + other; };
  const auto max = [](float own, float other) { return own > other ? own : other; };
  std::vector<float> in(64);
  uint64_t state = 7;
  for (float& x : in) {
    const double unit = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    x = static_cast<float>((unit - 0.5) *
                           std::ldexp(1.0, static_cast<int>(splitmix64(state) % 20)));
  }
  for (int width = 1; width <= 32; width *= 2) {
    std::vector<float> loop_sum(64), loop_max(64), one_sum(64), one_max(64);
    launch("butterfly", dim3(1), dim3(64), 0, [&] {
      const int t = static_cast<int>(coordinates().thread_idx.x);
      float s = in[t], m = in[t];
      for (int offset = width / 2; offset > 0; offset /= 2) {
        s = add(s, shfl_xor(0xffffffffu, s, offset, width));
        m = max(m, shfl_xor(0xffffffffu, m, offset, width));
      }
      loop_sum[t] = s;
      loop_max[t] = m;
      one_sum[t] = butterfly(0xffffffffu, in[t], width, add);
      one_max[t] = butterfly(0xffffffffu, in[t], width, max);
    });
    for (int t = 0; t < 64; ++t) {
      EXPECT_EQ(std::bit_cast<uint32_t>(one_sum[t]), std::bit_cast<uint32_t>(loop_sum[t]))
          << "width " << width << " lane " << t;
      EXPECT_EQ(one_max[t], loop_max[t]) << "width " << width << " lane " << t;
    }
    if (width == 32) {  // the order matters: left to right over the warp differs somewhere
      int differ = 0;
      for (int t = 0; t < 64; ++t) {
        float left_to_right = 0.0f;
        for (int i = t / 32 * 32; i < t / 32 * 32 + 32; ++i) left_to_right += in[i];
        differ += left_to_right != one_sum[t];
      }
      EXPECT_GT(differ, 0);
    }
  }
  // A butterfly reads lane XOR offset: a mask without it is the shuffle's error.
  EXPECT_TRUE(contains(launch_error([&] {
                         launch("butterfly-mask", dim3(1), dim3(32), 0, [&] {
                           if (coordinates().thread_idx.x < 16)
                             butterfly(0x0000ffffu, 1.0f, 32, add);
                         });
                       }),
                       "lane 0 reads lane 16, which its mask leaves out"));
  // Lanes at a butterfly and at a lone shuffle of the same mask do not meet.
  EXPECT_TRUE(contains(launch_error([&] {
                         launch("butterfly-mixed", dim3(1), dim3(32), 0, [&] {
                           if (coordinates().thread_idx.x == 0) {
                             shfl_xor(0xffffffffu, 1.0f, 1);
                           } else {
                             butterfly(0xffffffffu, 1.0f, 32, add);
                           }
                         });
                       }),
                       "while lane 0 waits at __shfl_xor_sync with mask"));
}

TEST(Simt, BallotCountsThePredicateOverTheMask) {
  std::vector<unsigned> got(32);
  launch("ballot", dim3(1), dim3(32), 0, [&] {
    const unsigned t = coordinates().thread_idx.x;
    got[t] = ballot(0xffffffffu, t % 3 == 0);
  });
  unsigned expected = 0;
  for (unsigned t = 0; t < 32; t += 3) expected |= 1u << t;
  for (unsigned g : got) EXPECT_EQ(g, expected);
}

// Lanes past the end of one op cannot overwrite what slower lanes still read: two
// back-to-back shuffles of different values.
TEST(Simt, BackToBackWarpOperationsDoNotMix) {
  std::vector<int> a(32), b(32);
  launch("twice", dim3(1), dim3(32), 0, [&] {
    const int t = static_cast<int>(coordinates().thread_idx.x);
    a[t] = shfl(0xffffffffu, t, 31 - t);
    b[t] = shfl(0xffffffffu, 100 + t, 31 - t);
  });
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(a[t], 31 - t);
    EXPECT_EQ(b[t], 131 - t);
  }
}

TEST(Simt, MisusesAreLaunchErrorsNamingTheThread) {
  // A mask that leaves out the calling lane.
  EXPECT_TRUE(contains(launch_error([] {
                         launch("own-lane", dim3(1), dim3(32), 0,
                                [] { shfl_xor(0x0000ffffu, 1, 1); });
                       }),
                       "own-lane block (0,0,0) thread (16,0,0): __shfl_xor_sync with mask "
                       "0x0000ffff, which leaves out its own lane 16"));
  // Reading a lane the mask leaves out.
  EXPECT_TRUE(contains(launch_error([] {
                         launch("source", dim3(1), dim3(32), 0, [] {
                           if (coordinates().thread_idx.x < 16) shfl(0x0000ffffu, 1, 20);
                         });
                       }),
                       "reads lane 20, which its mask leaves out"));
  // A width that is not a power of two.
  EXPECT_TRUE(contains(
      launch_error([] { launch("width", dim3(1), dim3(32), 0, [] { shfl(~0u, 1, 0, 12); }); }),
      "__shfl_sync with width 12 (a power of two up to 32)"));
  // A full mask in a block of 16 threads: lanes 16..31 never come.
  EXPECT_TRUE(contains(launch_error([] {
                         launch("short-warp", dim3(1), dim3(16), 0,
                                [] { shfl_xor(0xffffffffu, 1, 1); });
                       }),
                       "waits at __shfl_xor_sync for lanes of its mask that never reach it"));
  // A barrier half the block skips.
  EXPECT_TRUE(contains(launch_error([] {
                         launch("divergent", dim3(2), dim3(64), 0, [] {
                           if (coordinates().thread_idx.x < 32) sync_block();
                         });
                       }),
                       "divergent block (0,0,0) thread (0,0,0): waits at __syncthreads that "
                       "other threads of its block never reach"));
  // Lanes of one warp at different operations.
  EXPECT_TRUE(contains(launch_error([] {
                         launch("mixed", dim3(1), dim3(32), 0, [] {
                           if (coordinates().thread_idx.x == 0) {
                             ballot(~0u, true);
                           } else {
                             shfl(~0u, 1, 0);
                           }
                         });
                       }),
                       "while lane 0 waits at __ballot_sync"));
  // A thread's exception ends the launch, and the next launch works.
  EXPECT_THROW(launch("throws", dim3(4), dim3(8), 0,
                      [] {
                        if (coordinates().block_idx.x == 2) throw std::runtime_error("boom");
                      }),
               std::runtime_error);
  int ran = 0;
  launch("after", dim3(1), dim3(8), 0, [&] { ++ran; });
  EXPECT_EQ(ran, 8);
  EXPECT_TRUE(contains(launch_error([] { launch("empty", dim3(1), dim3(0), 0, [] {}); }),
                       "empty: a launch of 1 blocks of 0 threads (1 to 1024 per block)"));
  EXPECT_TRUE(contains(launch_error([] { coordinates(); }), "outside a launch"));
}

// The kind and message of the HazardError that `run` throws (nullopt if none).
template <class F>
std::optional<std::pair<Hazard, std::string>> hazard(F run) {
  try {
    run();
  } catch (const HazardError& e) {
    return std::pair{e.hazard, std::string(e.what())};
  }
  return std::nullopt;
}

// The order in which 64 threads first run, under `order`.
std::vector<int> first_runs(ThreadOrder order, uint64_t seed = 0) {
  const LaunchSettings settings({order, seed}, Checks{});
  std::vector<int> ran;
  launch("order", dim3(1), dim3(64), 0,
         [&] { ran.push_back(static_cast<int>(coordinates().thread_idx.x)); });
  return ran;
}

TEST(SimtSchedule, EachOrderRunsTheThreadsInItsOrder) {
  std::vector<int> forward(64), backward(64), interleaved;
  std::iota(forward.begin(), forward.end(), 0);
  std::iota(backward.rbegin(), backward.rend(), 0);
  for (int lane = 0; lane < 32; ++lane) {
    interleaved.push_back(lane);
    interleaved.push_back(32 + lane);
  }
  EXPECT_EQ(first_runs(ThreadOrder::thread), forward);
  EXPECT_EQ(first_runs(ThreadOrder::warp_ahead), forward);
  EXPECT_EQ(first_runs(ThreadOrder::reversed), backward);
  EXPECT_EQ(first_runs(ThreadOrder::warp_interleaved), interleaved);
  // Random: a permutation of whole warps, each forwards or backwards; the same for the
  // same seed, another for another seed.
  const std::vector<int> random = first_runs(ThreadOrder::random, 7);
  std::vector<int> sorted = random;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, forward);
  for (int w = 0; w < 2; ++w) {
    const int first = random[static_cast<size_t>(32 * w)];
    const int step = random[static_cast<size_t>(32 * w + 1)] - first;
    EXPECT_TRUE(step == 1 || step == -1);
    for (int l = 0; l < 32; ++l)
      EXPECT_EQ(random[static_cast<size_t>(32 * w + l)], first + step * l);
  }
  EXPECT_EQ(first_runs(ThreadOrder::random, 7), random);
  bool differs = false;
  for (uint64_t seed = 1; seed < 9; ++seed)
    differs = differs || first_runs(ThreadOrder::random, seed) != random;
  EXPECT_TRUE(differs);
}

// Under warp_ahead a warp whose shuffle completes runs on to the next __syncthreads before
// the warps after it reach their shuffle; in thread order every warp reaches its shuffle
// first.
TEST(SimtSchedule, WarpAheadRunsAWarpToItsNextBarrier) {
  std::vector<std::vector<std::string>> seen;
  for (const ThreadOrder order : {ThreadOrder::thread, ThreadOrder::warp_ahead}) {
    const LaunchSettings settings({order, 0}, Checks{});
    std::vector<std::string> events;
    launch("ahead", dim3(1), dim3(64), 0, [&] {
      const int t = static_cast<int>(coordinates().thread_idx.x);
      const std::string warp = "warp " + std::to_string(t / 32);
      if (t % 32 == 0) events.push_back(warp + " at its shuffle");
      shfl_xor(0xffffffffu, t, 1);
      if (t % 32 == 31) events.push_back(warp + " at the barrier");
      sync_block();
    });
    seen.push_back(events);
  }
  EXPECT_EQ(seen[0], (std::vector<std::string>{"warp 0 at its shuffle", "warp 1 at its shuffle",
                                               "warp 0 at the barrier", "warp 1 at the barrier"}));
  EXPECT_EQ(seen[1], (std::vector<std::string>{"warp 0 at its shuffle", "warp 0 at the barrier",
                                               "warp 1 at its shuffle", "warp 1 at the barrier"}));
}

// A tile written by lanes of warp 1 and read by warp 0 without a barrier: thread order
// reads poison in the rows; reversed order (warp 1 first) reads it right. The race check
// names it whichever order ran, with both threads and both lines.
TEST(SimtRaces, AReadAfterWriteAcrossWarpsIsARaceInEveryOrder) {
  for (const ThreadOrder order : kThreadOrders) {
    SCOPED_TRACE(thread_order_name(order));
    const LaunchSettings settings({order, 3}, Checks{});
    const auto found = hazard([] {
      launch("raw", dim3(1), dim3(64), 0, [] {
        const Shared<float> tile(shared_array<float>(32, "tile"));
        const int t = static_cast<int>(coordinates().thread_idx.x);
        if (t >= 32) tile[t - 32] = 1.0f;
        if (t < 32) {
          const float x = tile[31 - t];
          (void)x;
        }
      });
    });
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->first, Hazard::race);
    EXPECT_TRUE(contains(found->second, "race (")) << found->second;
    EXPECT_TRUE(contains(found->second, "on shared memory `tile`[")) << found->second;
    EXPECT_TRUE(contains(found->second, "test_simt.cpp:")) << found->second;
    // Warp 1 first (reversed): a read after its write; warp 0 first: a read of a word no
    // thread wrote yet, stopped before the poison is used.
    const bool after_write = contains(found->second, "with no __syncthreads between them");
    const bool before_write = contains(found->second, "before any thread of its block wrote it");
    EXPECT_TRUE(after_write || before_write) << found->second;
    if (order != ThreadOrder::random) {
      EXPECT_EQ(after_write, order == ThreadOrder::reversed) << found->second;
    }
  }
  // Thread order over a tile written before a barrier: warp 0 reads first, so the race is
  // a write after read by thread 32.
  const LaunchSettings settings({}, Checks{});
  const auto war = hazard([] {
    launch("war", dim3(1), dim3(64), 0, [] {
      const Shared<float> tile(shared_array<float>(32, "tile"));
      const int t = static_cast<int>(coordinates().thread_idx.x);
      if (t < 32) tile[t] = 1.0f;
      sync_block();
      if (t < 32) (void)static_cast<float>(tile[t]);
      if (t >= 32) tile[t - 32] = 2.0f;
    });
  });
  ASSERT_TRUE(war.has_value());
  EXPECT_TRUE(contains(war->second,
                       "race (write after read) on shared memory `tile`[0] (byte 0 "
                       "of 128): war block (0,0,0) thread (32,0,0) writes it at "))
      << war->second;
  EXPECT_TRUE(contains(war->second, "after thread (0,0,0) read it at test_simt.cpp:"))
      << war->second;
}

TEST(SimtRaces, BarriersAndWarpOperationsOrderAccessesAndEqualWritesAreNoRace) {
  const LaunchSettings settings({ThreadOrder::random, 11}, Checks{});
  EXPECT_FALSE(hazard([] {
                 launch("ordered", dim3(2), dim3(96), 0, [] {
                   const Shared<float> tile(shared_array<float>(96, "tile"));
                   const Shared<float> flag(shared_array<float>(1, "flag"));
                   const int t = static_cast<int>(coordinates().thread_idx.x);
                   tile[t] = static_cast<float>(t);
                   sync_block();  // every write before every read
                   const float mirror = tile[95 - t];
                   sync_block();  // every read before the next writes
                   tile[t] = mirror;
                   // Lanes of one warp, ordered by a warp operation both take part in.
                   const int lane0 = t / 32 * 32;
                   if (t == lane0) tile[t] = 5.0f;
                   sync_warp(0xffffffffu);
                   (void)static_cast<float>(tile[lane0]);
                   shfl_xor(0xffffffffu, 0, 1);
                   if (t == lane0 + 1) tile[lane0] = 6.0f;
                   // Every thread storing the same bits: no order changes the result.
                   flag[0] = 1.0f;
                 });
               }).has_value());
  // The same store of the same bits after a read of another warp is still a race (the
  // read may see either).
  const auto same_after_read = hazard([] {
    launch("same", dim3(1), dim3(64), 0, [] {
      const Shared<float> x(shared_array<float>(1, "x"));
      const int t = static_cast<int>(coordinates().thread_idx.x);
      if (t == 0) x[0] = 1.0f;
      sync_block();
      if (t == 1) (void)static_cast<float>(x[0]);
      if (t == 40) x[0] = 2.0f;
    });
  });
  ASSERT_TRUE(same_after_read.has_value());
  // Different bits from two warps: write after write.
  const auto waw = hazard([] {
    launch("waw", dim3(1), dim3(64), 0, [] {
      const Shared<float> x(shared_array<float>(1, "x"));
      x[0] = static_cast<float>(coordinates().thread_idx.x / 32);
    });
  });
  ASSERT_TRUE(waw.has_value());
  EXPECT_TRUE(contains(waw->second, "race (write after write) on shared memory `x`[0]"))
      << waw->second;
  // Lanes of one warp with no warp operation between them.
  const auto lockstep = hazard([] {
    launch("lockstep", dim3(1), dim3(32), 0, [] {
      const Shared<int> x(shared_array<int>(1, "x"));
      if (coordinates().thread_idx.x == 0) x[0] = 7;
      (void)static_cast<int>(x[0]);
    });
  });
  ASSERT_TRUE(lockstep.has_value());
  EXPECT_TRUE(contains(lockstep->second, "lanes of one warp with no warp operation between them"))
      << lockstep->second;
}

TEST(SimtRaces, BarriersMetFromTwoCallSitesAreBarrierDivergence) {
  const LaunchSettings settings({}, Checks{});
  const auto found = hazard([] {
    launch("branches", dim3(1), dim3(64), 0, [] {
      if (coordinates().thread_idx.x == 0) {
        sync_block();
      } else {
        sync_block();
      }
    });
  });
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->first, Hazard::barrier_divergence);
  EXPECT_TRUE(contains(found->second,
                       "barrier-divergence: branches block (0,0,0) thread (1,0,0) reaches "
                       "__syncthreads at test_simt.cpp:"))
      << found->second;
  EXPECT_TRUE(contains(found->second, "while thread (0,0,0) waits at the one at test_simt.cpp:"))
      << found->second;
  // One call site in a loop, met by every thread: no divergence.
  EXPECT_FALSE(hazard([] {
                 launch("loop", dim3(1), dim3(64), 0, [] {
                   for (int i = 0; i < 3; ++i) sync_block();
                 });
               }).has_value());
}

// With the checks off the launcher is what it was: the hazards above pass unnamed.
TEST(SimtRaces, ChecksOffNameNothing) {
  const LaunchSettings settings({}, Checks{false, false});
  EXPECT_FALSE(hazard([] {
                 launch("off", dim3(1), dim3(64), 0, [] {
                   const Shared<float> x(shared_array<float>(1, "x"));
                   x[0] = static_cast<float>(coordinates().thread_idx.x);
                   if (coordinates().thread_idx.x == 0) {
                     sync_block();
                   } else {
                     sync_block();
                   }
                 });
               }).has_value());
}

}  // namespace
}  // namespace kvfuzz::simt
