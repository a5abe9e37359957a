// Generated token data is deterministic and exact: the same seed gives the same bits on
// every machine and compiler (the golden values below pin the PRNG and the mappings).
#include <gtest/gtest.h>

#include <cmath>

#include "kvfuzz/prng.h"
#include "kvfuzz/token_table.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

TEST(Prng, SplitmixAndXoshiroMatchGoldenValues) {
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xE220A8397B1DCDAFull);  // published splitmix64(0) output
  // Pinned outputs: identical under g++ and clang (both presets run this test).
  Xoshiro256 rng(42);
  EXPECT_EQ(rng.next(), 0x15780B2E0C2EC716ull);
  EXPECT_EQ(rng.next(), 0x6104D9866D113A7Eull);
  EXPECT_EQ(rng.next(), 0xAE17533239E499A1ull);
}

TEST(Prng, BelowStaysInRange) {
  Xoshiro256 rng(7);
  for (int i = 0; i < 10000; ++i) {
    EXPECT_LT(rng.below(3), 3u);
    const int64_t x = rng.between(-5, 5);
    EXPECT_GE(x, -5);
    EXPECT_LE(x, 5);
  }
}

TEST(Prng, MappingsAreExactAndInRange) {
  Xoshiro256 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t bits = rng.next();
    const float s = small_int_from_bits(bits);
    EXPECT_EQ(s, std::floor(s));
    EXPECT_LE(std::abs(s), 4.0f);
    const float d = dyadic_from_bits(bits);
    EXPECT_EQ(d * 8, std::floor(d * 8));
    EXPECT_LE(std::abs(d), 4.0f);
    const float u = uniform_from_bits(bits);
    EXPECT_GE(u, -1.0f);
    EXPECT_LT(u, 1.0f);
    const float w = wide_from_bits(bits);
    EXPECT_GE(std::abs(w), std::ldexp(1.0f, -12));
    EXPECT_LT(std::abs(w), std::ldexp(1.0f, 13));
  }
}

Layout small_layout() {
  return test::make_layout({.q_heads = 2, .kv_heads = 1, .head_dim = 3, .value_dim = 2});
}

TEST(TokenTable, GeneratedDataIsDeterministicAndPinned) {
  const GeneratedTokens source{123, 4, Distribution::small_int, false};
  const TokenTable a(source, small_layout());
  const TokenTable b(source, small_layout());
  ASSERT_EQ(a.count(), 4);
  for (int t = 0; t < 4; ++t) {
    EXPECT_TRUE(std::equal(a.q(t).begin(), a.q(t).end(), b.q(t).begin()));
    EXPECT_TRUE(std::equal(a.v(t).begin(), a.v(t).end(), b.v(t).begin()));
  }
  // Golden values: a change here changes every generated fixture (format break).
  Xoshiro256 rng(123);
  EXPECT_EQ(a.q(0)[0], small_int_from_bits(rng.next()));
  for (int i = 0; i < 5; ++i) rng.next();  // rest of q (6 values) for token 0
  EXPECT_EQ(a.k(0)[0], small_int_from_bits(rng.next()));
}

TEST(TokenTable, EveryDistributionIsPinned) {
  struct Golden {
    Distribution distribution;
    float q15, k12, v11;  // q(1)[5], k(1)[2], v(1)[1]
  };
  const Golden goldens[] = {
      {Distribution::small_int, 0x1p+0f, -0x1p+0f, 0x0p+0f},
      {Distribution::dyadic, 0x1.2p+0f, -0x1.cp+1f, -0x1.9p+1f},
      {Distribution::uniform, -0x1.6baab8p-2f, -0x1.81f5fcp-1f, 0x1.b07f74p-1f},
      {Distribution::wide, 0x1.2p+0f, -0x1.cp+1f, -0x1.448p+5f},  // q, k dyadic; v wide
  };
  for (const Golden& g : goldens) {
    const TokenTable table(GeneratedTokens{123, 2, g.distribution, false}, small_layout());
    EXPECT_EQ(table.q(1)[5], g.q15);
    EXPECT_EQ(table.k(1)[2], g.k12);
    EXPECT_EQ(table.v(1)[1], g.v11);
  }
}

TEST(TokenTable, ZeroScoresZeroesQAndKButNotV) {
  const TokenTable table(GeneratedTokens{5, 3, Distribution::wide, true}, small_layout());
  bool any_v = false;
  for (int t = 0; t < 3; ++t) {
    for (float x : table.q(t)) EXPECT_EQ(x, 0.0f);
    for (float x : table.k(t)) EXPECT_EQ(x, 0.0f);
    for (float x : table.v(t)) any_v |= x != 0.0f;
  }
  EXPECT_TRUE(any_v);
}

// qk_log2 multiplies q and k by a power of two, exactly and in every dtype; v and the draw
// are unchanged.
TEST(TokenTable, QkMagnitudeScalesQAndKExactly) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    Layout layout = small_layout();
    layout.dtype = dtype;
    const TokenTable plain(GeneratedTokens{5, 3, Distribution::dyadic, false}, layout);
    const TokenTable large(
        GeneratedTokens{.seed = 5, .count = 3, .distribution = Distribution::dyadic, .qk_log2 = 12},
        layout);
    bool any = false;
    for (int t = 0; t < 3; ++t) {
      for (size_t i = 0; i < plain.q(t).size(); ++i) EXPECT_EQ(large.q(t)[i], plain.q(t)[i] * 4096);
      for (size_t i = 0; i < plain.k(t).size(); ++i) EXPECT_EQ(large.k(t)[i], plain.k(t)[i] * 4096);
      for (size_t i = 0; i < plain.v(t).size(); ++i) EXPECT_EQ(large.v(t)[i], plain.v(t)[i]);
      for (float x : plain.q(t)) any |= x != 0;
    }
    EXPECT_TRUE(any);
  }
}

TEST(TokenTable, ValuesAreRoundedToTheStorageDtype) {
  const Layout layout = test::make_layout({.dtype = DType::bf16});
  ExplicitToken token{{{1.0 + 1.0 / 1024}}, {{0.1}}, {{3.14159}}};
  const TokenTable table(std::vector<ExplicitToken>{token}, layout);
  EXPECT_EQ(table.q(0)[0], 1.0f);  // 1 + 2^-10 is below bf16 resolution
  EXPECT_EQ(table.k(0)[0], round_to_dtype(0.1f, DType::bf16));
  EXPECT_EQ(table.v(0)[0], round_to_dtype(3.14159f, DType::bf16));
}

// MLA over an fp8 key cache: the value is the stored latent, through K's format and scale.
// Key [1.1, 3] with e4m3fn at scale 0.5: 1.1 / 0.5 = 2.2 is stored as 2.25 (e4m3's step in
// [2, 4) is 0.25), read back as 1.125: the value; without the format the value is 1.1.
TEST(TokenTable, AnMlaValueOverAnFp8KeyCacheIsTheStoredLatent) {
  Layout layout = test::make_layout(
      {.head_dim = 2, .value_dim = 1, .k_format = KvFormat{KvQuant::fp8_e4m3fn, {0.5}, 0}});
  layout.value_from_key = true;
  const std::vector<ExplicitToken> tokens{{{{0.0, 0.0}}, {{1.1, 3.0}}, {}}};
  const TokenTable table(tokens, layout);
  EXPECT_EQ(table.k(0)[0], 1.1f);
  EXPECT_EQ(table.k_stored(0)[0], 1.125f);
  EXPECT_EQ(table.v(0)[0], 1.125f);
  EXPECT_EQ(table.v_stored(0)[0], 1.125f);
  layout.k_format = KvFormat{};
  EXPECT_EQ(TokenTable(tokens, layout).v(0)[0], 1.1f);
}

// Over a q8_0 key cache (llama.cpp's DeepSeek with -ctk q8_0) the value is the key row's
// first blocks as stored: block 0's scale is its own amax / 127 = 1, so 1.3 reads back as 1,
// whatever the next block (the RoPE part's, in a layout with one) holds.
TEST(TokenTable, AnMlaValueOverAQ8_0KeyCacheIsItsOwnBlocksAsStored) {
  Layout layout = test::make_layout(
      {.head_dim = 64, .value_dim = 32, .k_format = KvFormat{KvQuant::q8_0, {}, 0}});
  layout.value_from_key = true;
  std::vector<double> key(64, 0.0);
  key[0] = 127.0;
  key[1] = 1.3;
  key[32] = 5000.0;  // block 1: a scale of its own
  const std::vector<ExplicitToken> tokens{{{std::vector<double>(64, 0.0)}, {key}, {}}};
  const TokenTable table(tokens, layout);
  EXPECT_EQ(table.k_stored(0)[1], 1.0f);
  EXPECT_EQ(table.v(0)[0], 127.0f);
  EXPECT_EQ(table.v(0)[1], 1.0f);
  EXPECT_EQ(table.v(0).size(), 32u);
}

}  // namespace
}  // namespace kvfuzz
