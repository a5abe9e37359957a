// The chunked prefill kernel (kernels/cuda/chunked_prefill.cuh) on the SIMT launcher,
// against attention computed in double here from the values the cache holds (decoded from
// f32, f16 or bf16 storage): several chunks of different lengths in one launch, chunks that
// start mid-sequence, MHA, GQA and MQA, block tables in a shuffled page order, windows,
// chunks longer than a query tile and contexts over several key tiles; P and the output
// rounded to bf16 within their bound; and the missing tile barrier (kFaultMissingTileSync)
// caught by the launcher's poison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/chunked_prefill.cuh"

namespace kvfuzz::cuda {
namespace {

struct Chunk {
  int context;  // positions of the sequence before the chunk (its first token's position)
  int tokens;
};

struct Case {
  int q_heads, kv_heads, head_dim, value_dim, page_size, window;
  std::vector<Chunk> chunks;
  int dtype = kStorageF32;
  int p_dtype = kNoRounding, out_dtype = kNoRounding;
  int faults = 0;
};

struct Result {
  double worst = 0;         // the largest |got - want| (Inf where got is not finite)
  double worst_finite = 0;  // the same over the finite values
  int nonfinite = 0;        // values that are NaN or Inf
  bool bf16_exact = true;   // every output value is a bf16
};

std::string describe(const Case& c) {
  // Appended piece by piece, not "literal" + std::string: g++ 12 -O3's -Wrestrict false
  // positive (GCC PR 105329) fails the plain Release build.
  std::string s = "q_heads ";
  for (const std::string& piece :
       {std::to_string(c.q_heads), std::string(", kv_heads "), std::to_string(c.kv_heads),
        std::string(", dims "), std::to_string(c.head_dim), std::string("/"),
        std::to_string(c.value_dim), std::string(", page "), std::to_string(c.page_size),
        std::string(", window "), std::to_string(c.window), std::string(", dtype "),
        std::to_string(c.dtype), std::string(", chunks")}) {
    s += piece;
  }
  for (const Chunk& k : c.chunks) {
    s += ' ';
    s += std::to_string(k.context);
    s += '+';
    s += std::to_string(k.tokens);
  }
  return s;
}

// Runs the kernel on `c` with data from `seed` (small integers over 8: |q|, |k|, |v| <= 1)
// and compares every output value with double attention over the stored values.
Result run(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-8, 8);
  const int chunks = static_cast<int>(c.chunks.size());
  // Chunk i belongs to sequence chunks - 1 - i: the kernel must go through chunk_seq.
  std::vector<int> chunk_seq(static_cast<size_t>(chunks)), first_token(1, 0), first_pos;
  std::vector<int> lengths(static_cast<size_t>(chunks));
  int max_pages = 0, longest = 0;
  for (int i = 0; i < chunks; ++i) {
    const Chunk& k = c.chunks[static_cast<size_t>(i)];
    chunk_seq[static_cast<size_t>(i)] = chunks - 1 - i;
    first_token.push_back(first_token.back() + k.tokens);
    first_pos.push_back(k.context);
    lengths[static_cast<size_t>(chunks - 1 - i)] = k.context + k.tokens;
    // One page more than the longest sequence needs: a key read one past its end finds
    // the NaN page below rather than the next row of the block table.
    max_pages = std::max(max_pages, (k.context + k.tokens + c.page_size - 1) / c.page_size + 1);
    longest = std::max(longest, k.tokens);
  }
  // Pages in a shuffled order, one more than the tables use: table entries past a
  // sequence's length name it, and it (like each page's slots past the length) holds NaN,
  // so a key read past a sequence's end shows.
  const int pages = chunks * (max_pages - 1) + 1, nan_page = pages - 1;
  std::vector<int> order(static_cast<size_t>(pages - 1));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int> tables(static_cast<size_t>(chunks * max_pages), nan_page);
  size_t next = 0;
  for (int s = 0; s < chunks; ++s) {
    const int used = (lengths[static_cast<size_t>(s)] + c.page_size - 1) / c.page_size;
    for (int p = 0; p < used; ++p) tables[static_cast<size_t>(s * max_pages + p)] = order[next++];
  }
  const size_t slots = static_cast<size_t>(pages) * static_cast<size_t>(c.page_size);
  const size_t k_elems = slots * static_cast<size_t>(c.kv_heads * c.head_dim);
  const size_t v_elems = slots * static_cast<size_t>(c.kv_heads * c.value_dim);
  std::vector<float> k(k_elems), v(v_elems);  // large enough for any dtype
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < k_elems; ++i)
    store_element(k.data(), static_cast<long long>(i), nan, c.dtype);
  for (size_t i = 0; i < v_elems; ++i)
    store_element(v.data(), static_cast<long long>(i), nan, c.dtype);
  auto slot_of = [&](int seq, int pos) {
    return static_cast<size_t>(tables[static_cast<size_t>(seq * max_pages + pos / c.page_size)]) *
               static_cast<size_t>(c.page_size) +
           static_cast<size_t>(pos % c.page_size);
  };
  for (int s = 0; s < chunks; ++s) {
    for (int pos = 0; pos < lengths[static_cast<size_t>(s)]; ++pos) {
      const size_t slot = slot_of(s, pos);
      for (size_t e = 0; e < static_cast<size_t>(c.kv_heads * c.head_dim); ++e) {
        store_element(k.data(), static_cast<long long>(slot * c.kv_heads * c.head_dim + e),
                      static_cast<float>(small(rng)) / 8, c.dtype);
      }
      for (size_t e = 0; e < static_cast<size_t>(c.kv_heads * c.value_dim); ++e) {
        store_element(v.data(), static_cast<long long>(slot * c.kv_heads * c.value_dim + e),
                      static_cast<float>(small(rng)) / 8, c.dtype);
      }
    }
  }
  const int tokens = first_token.back();
  std::vector<float> q(static_cast<size_t>(tokens * c.q_heads * c.head_dim));
  for (float& x : q) x = static_cast<float>(small(rng)) / 8;
  // Rows the kernel leaves unwritten stay NaN.
  std::vector<float> out(static_cast<size_t>(tokens * c.q_heads * c.value_dim), nan);

  PrefillArgs a;
  a.kv = {.k = k.data(),
          .v = v.data(),
          .k_type = c.dtype,
          .v_type = c.dtype,
          .block_tables = tables.data(),
          .max_pages = max_pages,
          .page_size = c.page_size,
          .kv_heads = c.kv_heads,
          .head_dim = c.head_dim,
          .value_dim = c.value_dim};
  a.q = q.data();
  a.chunk_seq = chunk_seq.data();
  a.chunk_first_token = first_token.data();
  a.chunk_first_pos = first_pos.data();
  a.chunks = chunks;
  a.q_heads = c.q_heads;
  a.window = c.window;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.p_dtype = c.p_dtype;
  a.out_dtype = c.out_dtype;
  a.faults = c.faults;
  a.out = out.data();
  KVFUZZ_LAUNCH(chunked_prefill, prefill_grid(chunks, longest, c.q_heads), dim3(kPrefillThreads),
                prefill_shared_bytes(c.head_dim, c.value_dim), a);

  Result result;
  const int group = c.q_heads / c.kv_heads;
  for (int ci = 0; ci < chunks; ++ci) {
    const int seq = chunk_seq[static_cast<size_t>(ci)];
    for (int token = first_token[static_cast<size_t>(ci)];
         token < first_token[static_cast<size_t>(ci) + 1]; ++token) {
      const int p =
          first_pos[static_cast<size_t>(ci)] + token - first_token[static_cast<size_t>(ci)];
      const int lo = c.window > 0 ? std::max(0, p - c.window + 1) : 0;
      for (int h = 0; h < c.q_heads; ++h) {
        const int kv = h / group;
        std::vector<double> w;
        double m = -INFINITY;
        for (int j = lo; j <= p; ++j) {
          const size_t base = (slot_of(seq, j) * c.kv_heads + kv) * c.head_dim;
          double dot = 0;
          for (int d = 0; d < c.head_dim; ++d) {
            dot += static_cast<double>(
                       q[static_cast<size_t>((token * c.q_heads + h) * c.head_dim + d)]) *
                   load_element(k.data(), static_cast<long long>(base) + d, c.dtype);
          }
          w.push_back(dot * a.scale);
          m = std::max(m, w.back());
        }
        double den = 0;
        for (double& x : w) den += x = std::exp(x - m);
        for (int d = 0; d < c.value_dim; ++d) {
          double num = 0;
          for (int j = lo; j <= p; ++j) {
            const size_t base = (slot_of(seq, j) * c.kv_heads + kv) * c.value_dim;
            num += w[static_cast<size_t>(j - lo)] *
                   load_element(v.data(), static_cast<long long>(base) + d, c.dtype);
          }
          const float got = out[static_cast<size_t>((token * c.q_heads + h) * c.value_dim + d)];
          const double e = std::isfinite(got) ? std::fabs(got - num / den) : INFINITY;
          result.worst = std::max(result.worst, e);
          if (std::isfinite(got)) {
            result.worst_finite = std::max(result.worst_finite, e);
          } else {
            ++result.nonfinite;
          }
          if (round_to(got, kStorageBf16) != got) result.bf16_exact = false;
        }
      }
    }
  }
  return result;
}

// Layouts over every axis the kernel indexes by; each line says what it adds.
const std::vector<Case>& layouts() {
  static const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 0, {{0, 1}}},                     // one token, head_dim 1, page 1
      {2, 2, 8, 8, 3, 0, {{0, 40}, {5, 7}, {70, 20}}},  // MHA; 40 tokens: 3 query tiles;
                                                        // context 70: 3 key tiles and more
      {6, 2, 64, 32, 16, 0, {{33, 17}, {0, 3}}},        // GQA 3, value_dim < head_dim
      {8, 2, 16, 24, 1, 10, {{50, 40}, {2, 9}}},        // GQA 4, window 10, page 1
      {4, 1, 1, 3, 3, 5, {{64, 33}, {0, 1}}},           // MQA, head_dim 1, window 5
      {2, 1, 256, 256, 16, 0, {{40, 24}, {0, 5}}},      // dims 256: the most shared memory
      {2, 2, 256, 128, 3, 40, {{100, 40}}},             // window 40: over two key tiles
      {3, 3, 4, 4, 16, 1, {{10, 20}}},                  // window 1: a query sees only itself
      {4, 2, 8, 64, 16, 0, {{0, 16}, {16, 16}, {31, 2}, {200, 1}}},  // tile-sized chunks
  };
  return cases;
}

TEST(ChunkedPrefill, MatchesDoubleAttentionAcrossLayouts) {
  const std::vector<Case>& cases = layouts();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_LT(run(cases[i], static_cast<uint32_t>(i + 1)).worst, 1e-5) << describe(cases[i]);
  }
}

// f16 and bf16 storage: the kernel decodes what is stored; the reference takes the same
// decoded values, so the f32 bound holds.
TEST(ChunkedPrefill, HalfPrecisionStorageMatchesItsDecodedValues) {
  const std::vector<Case>& cases = layouts();
  for (int dtype : {kStorageF16, kStorageBf16}) {
    for (size_t i : {1, 3, 6}) {
      Case c = cases[i];
      c.dtype = dtype;
      EXPECT_LT(run(c, static_cast<uint32_t>(100 + i)).worst, 1e-5) << describe(c);
    }
  }
}

// P rounded to bf16 before P.V and the output rounded to bf16. bf16 keeps 8 significant
// bits, so each rounding is off by at most 2^-8 relative: P's rounding moves the row
// sum_j P_j v_j / l by at most 2^-8 max |v| <= 2^-8 (l takes P unrounded), and the
// output's by at most 2^-8 |out| <= 2^-8. Bound: 2^-7, plus 1e-5 for the f32 arithmetic.
TEST(ChunkedPrefill, Bf16PAndOutputStayWithinTheirRoundingBound) {
  const std::vector<Case>& cases = layouts();
  for (size_t i : {1, 3, 5, 6}) {
    Case c = cases[i];
    c.p_dtype = kStorageBf16;
    c.out_dtype = kStorageBf16;
    const Result r = run(c, static_cast<uint32_t>(200 + i));
    EXPECT_LE(r.worst, std::ldexp(1.0, -7) + 1e-5) << describe(c);
    EXPECT_TRUE(r.bf16_exact) << describe(c);
  }
}

// The grid covers the longest chunk; blocks past a shorter chunk's end return at once
// (the layouts above hold such blocks, and check that they write nothing wrong).
TEST(ChunkedPrefill, GridAndSharedMemory) {
  const dim3 g = prefill_grid(3, 40, 6);
  EXPECT_EQ(g.x, 3u);
  EXPECT_EQ(g.y, 3u);  // ceil(40 / 16)
  EXPECT_EQ(g.z, 6u);
  EXPECT_EQ(prefill_grid(1, 16, 1).y, 1u);
  EXPECT_EQ(prefill_grid(1, 17, 1).y, 2u);
  // q [16][256], K and V [32][256], scores [16][32], m, l, rescale [16], acc [16][256].
  EXPECT_EQ(prefill_shared_bytes(256, 256),
            4u * (16 * 256 + 2 * 32 * 256 + 16 * 32 + 3 * 16 + 16 * 256));
  EXPECT_LE(prefill_shared_bytes(kPrefillMaxDim, kPrefillMaxDim), simt::kMaxSharedBytes);
}

// P is rounded for P.V only: l sums it unrounded. One query (position 9, scale 1,
// head_dim 1, q = 1) over ten keys, the own key's k = 1 and the nine before it k = 0, every
// v = 1: the scores are 1 and nine 0, so P is 1 and nine e^-1 (one key tile: the row max is
// final), and the row is (1 + 9 bf16(e^-1)) / (1 + 9 e^-1) = 0.99856, not the 1 that a
// kernel gives when it leaves P unrounded, or when l sums the rounded P as well.
TEST(ChunkedPrefill, PRoundedForPVButSummedUnrounded) {
  const int keys = 10;
  std::vector<float> k(16, 0.0f), v(16, 1.0f);
  k[keys - 1] = 1.0f;
  const std::vector<int> table = {0}, seq = {0}, first_token = {0, 1}, first_pos = {keys - 1};
  const float q = 1.0f;
  float out = 0.0f;
  PrefillArgs a;
  a.kv.k = k.data();
  a.kv.v = v.data();
  a.kv.block_tables = table.data();
  a.kv.max_pages = 1;
  a.kv.page_size = 16;
  a.q = &q;
  a.chunk_seq = seq.data();
  a.chunk_first_token = first_token.data();
  a.chunk_first_pos = first_pos.data();
  a.chunks = 1;
  a.q_heads = 1;
  a.p_dtype = kStorageBf16;
  a.out = &out;
  KVFUZZ_LAUNCH(chunked_prefill, prefill_grid(1, 1, 1), dim3(kPrefillThreads),
                prefill_shared_bytes(1, 1), a);
  const float e = expf(-1.0f);
  const double want = (1.0 + 9.0 * round_to(e, kStorageBf16)) / (1.0 + 9.0 * e);
  EXPECT_LT(want, 1.0 - 1e-3);
  EXPECT_NEAR(out, want, 1e-6);
}

// kFaultMissingTileSync: with the barrier after the K/V tile's load left out, the early
// threads score keys the later threads have not loaded yet: NaN poison on the first tile
// (thread 0 scores row 0 against the tile's first key, which row 0 always sees and whose
// K the next threads load; at head_dim 1, against keys 8, 16 and 24, which the layout's
// context makes visible) and the previous tile's keys on later tiles (finite rows, far
// off). The honest kernel on the same data is within 1e-5; the faulted one has NaN rows in
// every case, and finite rows off by more than 0.25 where a block walks several key tiles
// (measured: 0.55 to 0.75): over four orders of magnitude apart, for outputs bounded by 1.
// Without the launcher's checks the missing barrier shows in the rows (poison, stale keys);
// with them (the default) it is a race, named before anything is read.
TEST(ChunkedPrefill, MissingTileSyncReadsUnloadedKeys) {
  const std::vector<Case>& cases = layouts();
  double stale = 0;
  for (size_t i : {1, 2, 4, 5, 6}) {
    Case c = cases[i];
    EXPECT_LT(run(c, static_cast<uint32_t>(300 + i)).worst, 1e-5) << describe(c);
    c.faults = kFaultMissingTileSync;
    {
      const simt::LaunchSettings unchecked({}, simt::Checks{false, false});
      const Result r = run(c, static_cast<uint32_t>(300 + i));
      EXPECT_GT(r.nonfinite, 0) << describe(c);
      stale = std::max(stale, r.worst_finite);
    }
    try {
      run(c, static_cast<uint32_t>(300 + i));
      ADD_FAILURE() << "no race named: " << describe(c);
    } catch (const simt::HazardError& e) {
      EXPECT_EQ(e.hazard, simt::Hazard::race) << describe(c);
    }
  }
  EXPECT_GT(stale, 0.25);
}

}  // namespace
}  // namespace kvfuzz::cuda
