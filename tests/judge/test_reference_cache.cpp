// The reference cache (judge/reference_cache.h): a hit returns the rows a fresh computation
// gives, bit for bit; judging several engines and every property on one scenario computes each
// stream's rows once; what the key leaves out (the page size) shares, what it holds (numerics,
// tokens) does not; reports are the same with the cache as without.
#include <gtest/gtest.h>

#include <cstring>

#include "judge/reference.h"
#include "judge/reference_cache.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"

namespace kvfuzz {
namespace {

Scenario scenario(uint64_t seed) {
  PrngChoiceSource choices(seed);
  GeneratorOptions options;
  options.typical_head_dim = 8;
  options.max_head_dim = 16;
  return generate_scenario(choices, options);
}

// One sequence of 4 generated tokens, one append.
Scenario test_tiny() {
  Scenario s;
  s.tokens = GeneratedTokens{0, 4};
  s.program = {Op::append(0, {0, 1, 2, 3})};
  return s;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

void expect_same(const ReferenceMap& a, const ReferenceMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    ASSERT_EQ(i->first, j->first);
    EXPECT_TRUE(same_bits(i->second.values, j->second.values)) << to_string(i->first);
    EXPECT_TRUE(same_bits(i->second.bound, j->second.bound)) << to_string(i->first);
    EXPECT_EQ(i->second.key_lo, j->second.key_lo);
  }
}

// What prepare() computes, without the cache.
ReferenceMap fresh(const Scenario& s, const EngineNumerics& numerics = {}) {
  const TokenTable table(s.tokens, s.layout);
  ReferenceMap map;
  for (const LogicalStream& stream : logical_streams(s)) {
    for (ReferenceRow& row : reference_rows(s.layout, table, stream, numerics)) {
      const RowKey key = row.key;
      map.emplace(key, std::move(row));
    }
  }
  return map;
}

TEST(ReferenceCache, AHitGivesTheFreshRows) {
  clear_reference_cache();
  const Scenario s = scenario(31);
  const long streams = static_cast<long>(logical_streams(s).size());
  const Prepared first = prepare(s);
  EXPECT_EQ(reference_cache_stats().misses, streams);
  EXPECT_EQ(reference_cache_stats().hits, 0);
  const Prepared second = prepare(s);
  EXPECT_EQ(reference_cache_stats().misses, streams);
  EXPECT_EQ(reference_cache_stats().hits, streams);
  expect_same(first.reference, fresh(s));
  expect_same(second.reference, fresh(s));
}

TEST(ReferenceCache, KeyedOnWhatTheRowsDependOn) {
  clear_reference_cache();
  const Scenario s = scenario(32);
  const long streams = static_cast<long>(logical_streams(s).size());
  prepare(s);
  // Another page size: the reference never sees pages.
  Scenario paged = s;
  paged.layout.page_size = s.layout.page_size == 1 ? 2 : 1;
  prepare(paged);
  EXPECT_EQ(reference_cache_stats().hits, streams);
  // Other numerics, other tokens, another dtype: computed afresh, and right.
  EngineNumerics numerics;
  numerics.p = DType::f16;
  expect_same(prepare(s, numerics).reference, fresh(s, numerics));
  Scenario tokens = s;
  std::get<GeneratedTokens>(tokens.tokens).seed += 1;
  expect_same(prepare(tokens).reference, fresh(tokens));
  Scenario dtype = s;
  dtype.layout.dtype = s.layout.dtype == DType::f16 ? DType::bf16 : DType::f16;
  expect_same(prepare(dtype).reference, fresh(dtype));
  EXPECT_EQ(reference_cache_stats().hits, streams);
  EXPECT_EQ(reference_cache_stats().misses, 4 * streams);
}

TEST(ReferenceCache, KeepsAtMostItsEntries) {
  clear_reference_cache();
  Scenario s = test_tiny();
  for (uint64_t seed = 0; seed < kReferenceCacheEntries + 20; ++seed) {
    std::get<GeneratedTokens>(s.tokens).seed = seed;
    prepare(s);
  }
  EXPECT_EQ(reference_cache_stats().entries, kReferenceCacheEntries);
  std::get<GeneratedTokens>(s.tokens).seed = 0;  // the oldest: dropped
  prepare(s);
  EXPECT_EQ(reference_cache_stats().hits, 0);
  std::get<GeneratedTokens>(s.tokens).seed = kReferenceCacheEntries + 19;  // the newest: kept
  prepare(s);
  EXPECT_EQ(reference_cache_stats().hits, 1);
}

TEST(ReferenceCache, SeveralEnginesAndEveryPropertyComputeEachStreamOnce) {
  const std::vector<const EngineInfo*> engines{find_engine("contiguous"), find_engine("paged"),
                                               find_engine("flash")};
  for (const EngineInfo* e : engines) ASSERT_NE(e, nullptr);
  for (uint64_t seed = 40; seed < 46; ++seed) {
    const Scenario s = scenario(seed);
    if (!std::holds_alternative<GeneratedTokens>(s.tokens)) continue;
    clear_reference_cache();
    std::vector<std::string> cached;
    std::vector<long> misses;  // after each engine
    for (const EngineInfo* engine : engines) {
      for (const PropertyInfo& p : kProperties) {
        cached.push_back(judge_property(p.property, s, *engine).report);
      }
      misses.push_back(reference_cache_stats().misses);
    }
    // The first engine computes each stream (once more for numerics other than the defaults
    // that prefix prepares first); the others, declaring the same numerics, compute nothing.
    const long streams = static_cast<long>(logical_streams(s).size());
    EXPECT_GE(misses[0], streams) << s.name;
    EXPECT_LE(misses[0], 2 * streams) << s.name;
    EXPECT_EQ(misses.back(), misses[0]) << s.name;
    EXPECT_GE(reference_cache_stats().hits, 2 * streams) << s.name;  // prefix at least
    // The same reports without sharing: the cache emptied before every judgement.
    size_t i = 0;
    for (const EngineInfo* engine : engines) {
      for (const PropertyInfo& p : kProperties) {
        clear_reference_cache();
        EXPECT_EQ(judge_property(p.property, s, *engine).report, cached[i++]) << s.name;
      }
    }
  }
}

}  // namespace
}  // namespace kvfuzz
