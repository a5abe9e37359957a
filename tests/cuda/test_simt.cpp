// The SIMT launcher (kernels/cuda/simt/simt.h): every thread of every block runs, barriers
// hold, warp operations give CUDA's values, shared memory starts as poison, and each misuse
// is a LaunchError naming the kernel, block and thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/simt/simt.h"

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

}  // namespace
}  // namespace kvfuzz::simt
