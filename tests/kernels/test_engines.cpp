// Unit tests of the CPU engines, the mutants and the registry: hand-derived rows (the
// worked example), a double-precision attention written here from the same formula,
// layout / poison / batch invariance, errors, the flash dispatch paths, truncate and fork
// (reference-counted pages, copy-on-write), and every mutant's predicted wrong answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cpu/flash_constants.h"
#include "cpu/flash_engine.h"
#include "cpu/page_pool.h"
#include "cpu/paged_storage_engine.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/prng.h"
#include "kvfuzz/token_table.h"
#include "scenario/limits.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

using test::make_layout;

// ---------------------------------------------------------------------------------------
// Test data and helpers

// Token-major q/k/v of a token stream, already rounded to the layout's dtype.
struct Data {
  Layout layout;
  int count = 0;
  std::vector<float> q, k, v;
  size_t qs() const { return static_cast<size_t>(layout.q_heads * layout.head_dim); }
  size_t ks() const { return static_cast<size_t>(layout.kv_heads * layout.head_dim); }
  size_t vs() const { return static_cast<size_t>(layout.kv_heads * layout.value_dim); }
};

Data generated(const Layout& layout, int count, uint64_t seed,
               Distribution distribution = Distribution::dyadic, bool zero_scores = false) {
  const TokenTable table(GeneratedTokens{seed, count, distribution, zero_scores}, layout);
  Data d{layout, count, {}, {}, {}};
  for (int t = 0; t < count; ++t) {
    d.q.insert(d.q.end(), table.q(t).begin(), table.q(t).end());
    d.k.insert(d.k.end(), table.k(t).begin(), table.k(t).end());
    d.v.insert(d.v.end(), table.v(t).begin(), table.v(t).end());
  }
  return d;
}

// One head, head_dim 1, q = k = 0, values 2, 4, 8, 16, 32, ... (the worked example).
Data worked(int count = 5) {
  const Layout layout = make_layout({.page_size = 4});
  Data d{layout, count, {}, {}, {}};
  for (int t = 0; t < count; ++t) {
    d.q.push_back(0);
    d.k.push_back(0);
    d.v.push_back(std::ldexp(1.0f, t + 1));
  }
  return d;
}

std::vector<int> identity_order(int pages) {
  std::vector<int> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

EngineConfig config_for(const Layout& layout, int sequences = 1, int pages = 64,
                        std::vector<int> order = {}, Poison poison = Poison::nan) {
  EngineConfig c;
  c.layout = layout;
  c.sequences = sequences;
  c.page_order = order.empty() ? identity_order(pages) : std::move(order);
  c.poison = poison;
  return c;
}

std::unique_ptr<Engine> make_engine(const std::string& name, const EngineConfig& config) {
  const EngineInfo* info = find_engine(name);
  if (info == nullptr) throw std::runtime_error("no engine " + name);
  return info->make(config);
}

// Tokens [first, first + count) of d, fed to sequence seq.
struct Feed {
  int seq = 0;
  int first = 0;
  int count = 0;
};

ChunkIn chunk_of(const Data& d, Feed f) {
  const auto at = [&](const std::vector<float>& data, size_t stride) {
    return std::span<const float>(data).subspan(static_cast<size_t>(f.first) * stride,
                                                static_cast<size_t>(f.count) * stride);
  };
  return ChunkIn{f.seq, f.count, at(d.q, d.qs()), at(d.k, d.ks()), at(d.v, d.vs())};
}

std::vector<ChunkOut> step(Engine& engine, const Data& d, const std::vector<Feed>& feeds) {
  std::vector<ChunkIn> chunks;
  for (const Feed& f : feeds) chunks.push_back(chunk_of(d, f));
  std::vector<ChunkOut> outs(chunks.size());
  engine.step(chunks, outs);
  return outs;
}

ChunkOut feed(Engine& engine, const Data& d, int seq, int first, int count) {
  return step(engine, d, {Feed{seq, first, count}})[0];
}

// Feeds tokens [0, n) of d to sequence 0 in chunks of the given sizes; returns all rows
// (concatenated out) and positions.
ChunkOut feed_schedule(Engine& engine, const Data& d, const std::vector<int>& sizes,
                       int first = 0) {
  ChunkOut all;
  for (int size : sizes) {
    ChunkOut o = feed(engine, d, 0, first, size);
    all.out.insert(all.out.end(), o.out.begin(), o.out.end());
    all.positions.insert(all.positions.end(), o.positions.begin(), o.positions.end());
    first += size;
  }
  return all;
}

// Full-prefix attention in double over tokens [first, first + n) of d as one stream:
// rows[p][h * value_dim + e]. The same formula the engines implement (RoPE half-split at
// the absolute position, window, GQA mapping h / group), written the obvious way.
std::vector<std::vector<double>> attention(const Data& d, int first, int n) {
  const Layout& l = d.layout;
  const size_t hd = static_cast<size_t>(l.head_dim), vd = static_cast<size_t>(l.value_dim);
  const auto rotate = [&](std::vector<double>& x, int64_t pos) {
    if (!l.rope_theta) return;
    const int half = l.head_dim / 2;
    for (int i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(pos) * std::pow(*l.rope_theta, -2.0 * i / l.head_dim);
      const double a = x[static_cast<size_t>(i)], b = x[static_cast<size_t>(i + half)];
      x[static_cast<size_t>(i)] = a * std::cos(angle) - b * std::sin(angle);
      x[static_cast<size_t>(i + half)] = a * std::sin(angle) + b * std::cos(angle);
    }
  };
  const auto head = [&](const std::vector<float>& data, size_t stride, int token, int h) {
    const float* p =
        data.data() + static_cast<size_t>(first + token) * stride + static_cast<size_t>(h) * hd;
    return std::vector<double>(p, p + hd);
  };
  std::vector<std::vector<double>> rows;
  for (int p = 0; p < n; ++p) {
    std::vector<double> row(static_cast<size_t>(l.q_heads) * vd, 0.0);
    const int lo = l.window ? std::max(0, p - *l.window + 1) : 0;
    for (int h = 0; h < l.q_heads; ++h) {
      const int g = h / l.group();
      std::vector<double> q = head(d.q, d.qs(), p, h);
      rotate(q, p);
      std::vector<double> scores;
      for (int j = lo; j <= p; ++j) {
        std::vector<double> k = head(d.k, d.ks(), j, g);
        rotate(k, j);
        double s = 0;
        for (size_t e = 0; e < hd; ++e) s += q[e] * k[e];
        scores.push_back(s * l.softmax_scale());
      }
      const double m = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - m));
      for (int j = lo; j <= p; ++j) {
        const float* v =
            d.v.data() + static_cast<size_t>(first + j) * d.vs() + static_cast<size_t>(g) * vd;
        for (size_t e = 0; e < vd; ++e) {
          row[static_cast<size_t>(h) * vd + e] += scores[static_cast<size_t>(j - lo)] / sum * v[e];
        }
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Every value of `got` (rows of the stream starting at position first_pos) within
// rel * (1 + max |v|) of the double rows.
void expect_rows_near(const ChunkOut& got, const std::vector<std::vector<double>>& want,
                      int64_t first_pos, double rel, const Data& d) {
  double max_v = 0;
  for (float x : d.v) max_v = std::max(max_v, std::fabs(static_cast<double>(x)));
  const double tol = rel * (1 + max_v);
  ASSERT_EQ(got.positions.size(), want.size() - static_cast<size_t>(first_pos));
  const size_t width = want[0].size();
  ASSERT_EQ(got.out.size(), got.positions.size() * width);
  for (size_t t = 0; t < got.positions.size(); ++t) {
    ASSERT_EQ(got.positions[t], first_pos + static_cast<int64_t>(t));
    const auto& row = want[static_cast<size_t>(got.positions[t])];
    for (size_t i = 0; i < width; ++i) {
      ASSERT_NEAR(got.out[t * width + i], row[i], tol) << "row " << t << " value " << i;
    }
  }
}

// Bit-identical rows and positions.
void expect_identical(const ChunkOut& a, const ChunkOut& b) {
  ASSERT_EQ(a.positions, b.positions);
  ASSERT_EQ(a.out.size(), b.out.size());
  for (size_t i = 0; i < a.out.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a.out[i]), std::bit_cast<uint32_t>(b.out[i]))
        << "value " << i << ": " << a.out[i] << " vs " << b.out[i];
  }
}

// ---------------------------------------------------------------------------------------
// Registry

TEST(Registry, HonestEnginesFirstThenMutants) {
  const std::vector<std::string> names{"contiguous",
                                       "paged",
                                       "flash",
                                       "mask-origin",
                                       "stale-position",
                                       "stale-kv",
                                       "page-tail-read",
                                       "wrong-kv-head",
                                       "truncate-keeps-position",
                                       "fork-restarts-positions",
                                       "truncate-shared-in-place"};
  const auto& registry = engine_registry();
  ASSERT_EQ(registry.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(registry[i].name, names[i]);
    EXPECT_EQ(registry[i].mutant, i >= 3) << names[i];
    EXPECT_FALSE(registry[i].description.empty());
    EXPECT_TRUE(registry[i].make);
    EXPECT_EQ(find_engine(names[i]), &registry[i]);
  }
  EXPECT_EQ(find_engine("nope"), nullptr);
}

// ---------------------------------------------------------------------------------------
// Every honest engine

class HonestEngine : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> make(const Layout& layout, int sequences = 1, int pages = 64,
                               std::vector<int> order = {}, Poison poison = Poison::nan) {
    return make_engine(GetParam(), config_for(layout, sequences, pages, std::move(order), poison));
  }
};

INSTANTIATE_TEST_SUITE_P(Cpu, HonestEngine, ::testing::Values("contiguous", "paged", "flash"));

TEST_P(HonestEngine, WorkedExample) {
  const Data d = worked();
  auto engine = make(d.layout);
  const ChunkOut cached = feed(*engine, d, 0, 0, 3);
  EXPECT_EQ(cached.positions, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_FLOAT_EQ(cached.out[0], 2.0f);
  EXPECT_FLOAT_EQ(cached.out[1], 3.0f);
  EXPECT_FLOAT_EQ(cached.out[2], 14.0f / 3.0f);
  const ChunkOut chunk = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(chunk.positions, (std::vector<int64_t>{3, 4}));
  EXPECT_FLOAT_EQ(chunk.out[0], 7.5f);
  EXPECT_FLOAT_EQ(chunk.out[1], 12.4f);
}

TEST_P(HonestEngine, OneTokenCacheThenChunk) {
  const Data d = worked();
  auto engine = make(d.layout);
  feed(*engine, d, 0, 0, 1);
  const ChunkOut one = feed(*engine, d, 0, 1, 1);
  EXPECT_EQ(one.positions, (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(one.out[0], 3.0f);
  const ChunkOut two = feed(*engine, d, 0, 2, 2);
  EXPECT_EQ(two.positions, (std::vector<int64_t>{2, 3}));
  EXPECT_FLOAT_EQ(two.out[0], 14.0f / 3.0f);
  EXPECT_FLOAT_EQ(two.out[1], 7.5f);
}

TEST_P(HonestEngine, EmptyChunkGivesNoRows) {
  const Data d = worked();
  auto engine = make(d.layout);
  const ChunkOut none = feed(*engine, d, 0, 0, 0);
  EXPECT_TRUE(none.out.empty());
  EXPECT_TRUE(none.positions.empty());
  EXPECT_EQ(feed(*engine, d, 0, 0, 1).positions, (std::vector<int64_t>{0}));
}

TEST_P(HonestEngine, ResetThenNewRequestMatchesFreshEngine) {
  const Layout layout = make_layout(
      {.q_heads = 2, .head_dim = 4, .value_dim = 3, .page_size = 3, .rope_theta = 10000.0});
  const Data d = generated(layout, 20, 7);
  auto engine = make(layout, 2);
  feed_schedule(*engine, d, {4, 3, 1, 1});  // request A on sequence 0: tokens 0..8
  feed(*engine, d, 1, 0, 5);                // a neighbour holding pages
  engine->reset(0);
  const ChunkOut b = feed_schedule(*engine, d, {5, 1, 1, 4}, 9);  // request B: tokens 9..19

  auto fresh = make(layout, 2);
  const ChunkOut want = feed_schedule(*fresh, d, {5, 1, 1, 4}, 9);
  expect_identical(b, want);
  EXPECT_EQ(b.positions.front(), 0);
}

TEST_P(HonestEngine, ResetTwiceAndResetOfEmptySequence) {
  const Data d = worked();
  auto engine = make(d.layout, 2);
  engine->reset(1);  // nothing there yet
  feed(*engine, d, 0, 0, 3);
  engine->reset(0);
  engine->reset(0);
  const ChunkOut b = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(b.positions, (std::vector<int64_t>{0, 1}));
  EXPECT_FLOAT_EQ(b.out[0], 16.0f);
  EXPECT_FLOAT_EQ(b.out[1], 24.0f);
}

TEST_P(HonestEngine, HalfPrecisionStorage) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 2,
                                       .head_dim = 4,
                                       .value_dim = 2,
                                       .page_size = 4,
                                       .dtype = dtype});
    const Data d = generated(layout, 12, 11, Distribution::uniform);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {5, 1, 6});
    expect_rows_near(got, attention(d, 0, 12), 0, 1e-5, d);
  }
  // Exact data: the worked example survives f16 and bf16 storage exactly.
  for (DType dtype : {DType::f16, DType::bf16}) {
    Data d = worked();
    d.layout.dtype = dtype;
    auto engine = make(d.layout);
    feed(*engine, d, 0, 0, 3);
    const ChunkOut chunk = feed(*engine, d, 0, 3, 2);
    EXPECT_EQ(chunk.out[0], 7.5f);
    EXPECT_EQ(chunk.out[1], 12.4f);
  }
}

TEST_P(HonestEngine, GroupedAndMultiQueryHeads) {
  for (int kv_heads : {2, 1}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
    const Layout layout = make_layout(
        {.q_heads = 4, .kv_heads = kv_heads, .head_dim = 4, .value_dim = 3, .page_size = 5});
    const Data d = generated(layout, 17, 3);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {6, 1, 1, 9});
    expect_rows_near(got, attention(d, 0, 17), 0, 1e-5, d);
  }
}

TEST_P(HonestEngine, RopeAtTheAbsolutePosition) {
  for (int head_dim : {2, 6, 3}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 1,
                                       .head_dim = head_dim,
                                       .value_dim = 2,
                                       .page_size = 4,
                                       .rope_theta = 100.0});
    const Data d = generated(layout, 40, 5, Distribution::uniform);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {3, 1, 1, 20, 1, 1, 13});
    expect_rows_near(got, attention(d, 0, 40), 0, 1e-5, d);
  }
}

TEST_P(HonestEngine, SlidingWindow) {
  for (int window : {1, 3, 8, 40}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 2,
                                       .head_dim = 2,
                                       .value_dim = 2,
                                       .page_size = 3,
                                       .window = window});
    const Data d = generated(layout, 50, 9);
    auto engine = make(layout);
    const ChunkOut got = feed_schedule(*engine, d, {4, 1, 1, 10, 1, 33});
    expect_rows_near(got, attention(d, 0, 50), 0, 1e-5, d);
  }
}

TEST_P(HonestEngine, BatchedStepOfTwoSequences) {
  const Layout layout = make_layout({.q_heads = 2,
                                     .kv_heads = 1,
                                     .head_dim = 4,
                                     .value_dim = 2,
                                     .page_size = 2,
                                     .rope_theta = 10000.0});
  const Data d = generated(layout, 20, 13);
  auto engine = make(layout, 3);
  // Sequence 0 holds tokens 0..5, sequence 2 tokens 6..19.
  const auto first = step(*engine, d, {Feed{0, 0, 3}, Feed{2, 6, 7}});
  const auto second = step(*engine, d, {Feed{2, 13, 1}, Feed{0, 3, 1}});
  const auto third = step(*engine, d, {Feed{0, 4, 2}, Feed{2, 14, 6}});
  ChunkOut a = first[0], b = first[1];
  for (const ChunkOut* o : {&second[1], &third[0]}) {
    a.out.insert(a.out.end(), o->out.begin(), o->out.end());
    a.positions.insert(a.positions.end(), o->positions.begin(), o->positions.end());
  }
  for (const ChunkOut* o : {&second[0], &third[1]}) {
    b.out.insert(b.out.end(), o->out.begin(), o->out.end());
    b.positions.insert(b.positions.end(), o->positions.begin(), o->positions.end());
  }
  expect_rows_near(a, attention(d, 0, 6), 0, 1e-5, d);
  expect_rows_near(b, attention(d, 6, 14), 0, 1e-5, d);
  // Batch invariance: alone, each sequence gives the same bits.
  auto alone = make(layout, 3);
  expect_identical(feed_schedule(*alone, d, {3, 1, 2}), a);
}

TEST_P(HonestEngine, LongContextMatchesDouble) {
  const Layout layout = make_layout({.q_heads = 2,
                                     .kv_heads = 1,
                                     .head_dim = 8,
                                     .value_dim = 4,
                                     .page_size = 16,
                                     .rope_theta = 10000.0});
  const Data d = generated(layout, 300, 17, Distribution::uniform);
  auto engine = make(layout);
  const ChunkOut got = feed_schedule(*engine, d, {100, 1, 1, 150, 1, 47});
  expect_rows_near(got, attention(d, 0, 300), 0, 1e-5, d);
}

TEST_P(HonestEngine, ErrorsAreEngineErrors) {
  const Data d = worked();
  auto engine = make(d.layout, 2);
  EXPECT_THROW(feed(*engine, d, 2, 0, 1), EngineError);
  EXPECT_THROW(feed(*engine, d, -1, 0, 1), EngineError);
  EXPECT_THROW(engine->reset(2), EngineError);
  EXPECT_THROW(step(*engine, d, {Feed{0, 0, 1}, Feed{0, 1, 1}}), EngineError);
  ChunkIn bad = chunk_of(d, Feed{0, 0, 2});
  bad.tokens = 3;  // spans hold 2 tokens
  std::vector<ChunkOut> outs(1);
  EXPECT_THROW(engine->step(std::span<const ChunkIn>(&bad, 1), outs), EngineError);
  std::vector<ChunkOut> no_outs;
  const ChunkIn ok = chunk_of(d, Feed{0, 0, 1});
  EXPECT_THROW(engine->step(std::span<const ChunkIn>(&ok, 1), no_outs), EngineError);
  // The engine is still usable and nothing was stored by the failed calls.
  const ChunkOut first = feed(*engine, d, 0, 0, 1);
  EXPECT_EQ(first.positions, (std::vector<int64_t>{0}));
  EXPECT_FLOAT_EQ(first.out[0], 2.0f);

  Layout bad_layout = d.layout;
  bad_layout.q_heads = 3;
  bad_layout.kv_heads = 2;
  EXPECT_THROW(make(bad_layout), EngineError);
  EXPECT_THROW(make(d.layout, 0), EngineError);
}

// ---------------------------------------------------------------------------------------
// The paged engines: placement, poison, pool

class PagedEngines : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Cpu, PagedEngines, ::testing::Values("paged", "flash"));

// A program over three sequences with resets, so freed pages are reused.
ChunkOut placement_run(const std::string& name, const Layout& layout, const Data& d,
                       std::vector<int> order, Poison poison) {
  auto engine = make_engine(name, config_for(layout, 3, 0, std::move(order), poison));
  ChunkOut all;
  const auto keep = [&](const std::vector<ChunkOut>& outs) {
    for (const ChunkOut& o : outs) {
      all.out.insert(all.out.end(), o.out.begin(), o.out.end());
      all.positions.insert(all.positions.end(), o.positions.begin(), o.positions.end());
    }
  };
  keep(step(*engine, d, {Feed{0, 0, 5}, Feed{1, 5, 2}}));
  keep(step(*engine, d, {Feed{1, 7, 1}, Feed{0, 8, 1}, Feed{2, 9, 4}}));
  engine->reset(0);
  keep(step(*engine, d, {Feed{0, 13, 7}}));
  keep(step(*engine, d, {Feed{0, 20, 1}, Feed{2, 21, 1}}));
  engine->reset(1);
  keep(step(*engine, d, {Feed{1, 22, 1}}));
  keep(step(*engine, d, {Feed{1, 23, 1}, Feed{0, 24, 6}}));
  for (int i = 0; i < 40; ++i) keep(step(*engine, d, {Feed{2, 30 + i, 1}}));  // split decodes
  return all;
}

TEST_P(PagedEngines, PageOrderAndPoisonDoNotChangeAnyRow) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Layout layout = make_layout({.q_heads = 2,
                                       .kv_heads = 1,
                                       .head_dim = 2,
                                       .value_dim = 2,
                                       .page_size = 3,
                                       .dtype = dtype});
    const Data d = generated(layout, 70, 21);
    const int pages = 40;
    const ChunkOut want = placement_run(GetParam(), layout, d, identity_order(pages), Poison::nan);
    std::vector<int> reversed = identity_order(pages);
    std::reverse(reversed.begin(), reversed.end());
    std::vector<int> shuffled = identity_order(pages);
    for (size_t i = 0; i < shuffled.size(); ++i) {
      std::swap(shuffled[i], shuffled[(i * 7 + 3) % shuffled.size()]);
    }
    for (const auto& order : {identity_order(pages), reversed, shuffled}) {
      for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
        SCOPED_TRACE(std::string(poison_name(poison)));
        expect_identical(placement_run(GetParam(), layout, d, order, poison), want);
      }
    }
  }
}

TEST_P(PagedEngines, PoolExhaustionIsAnEngineError) {
  const Data d = worked(12);
  Layout layout = d.layout;
  layout.page_size = 2;
  auto engine = make_engine(GetParam(), config_for(layout, 2, 3));
  feed(*engine, d, 0, 0, 3);  // two pages
  EXPECT_THROW(feed(*engine, d, 1, 3, 3), EngineError);
  // Nothing was taken by the failed step: one page is still free for sequence 1.
  const ChunkOut ok = feed(*engine, d, 1, 3, 2);
  EXPECT_EQ(ok.positions, (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(feed(*engine, d, 0, 5, 2), EngineError);
  // A reset gives the pages back.
  engine->reset(1);
  const ChunkOut more = feed(*engine, d, 0, 3, 3);
  EXPECT_EQ(more.positions, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_FLOAT_EQ(more.out[2], (2 + 4 + 8 + 16 + 32 + 64) / 6.0f);
  // An empty pool refuses the first token.
  auto empty = make_engine(GetParam(), config_for(layout, 1, 0));
  EXPECT_THROW(feed(*empty, d, 0, 0, 1), EngineError);
}

TEST_P(PagedEngines, PageOrderMustBeAPermutation) {
  const Layout layout;
  EXPECT_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {0, 0})), EngineError);
  EXPECT_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {0, 2})), EngineError);
  EXPECT_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {-1, 0})), EngineError);
  EXPECT_NO_THROW(make_engine(GetParam(), config_for(layout, 1, 0, {1, 0})));
}

// ---------------------------------------------------------------------------------------
// PagedKvStore directly: poison everywhere at the start and after a release, reuse order

// Physical page of slot `pos` of `seq`, recovered from the store's K offsets.
int page_of(const cpu::PagedKvStore& store, const Layout& layout, int seq, int64_t pos) {
  const size_t slot = store.k_offset(seq, pos, 0) / static_cast<size_t>(layout.kv_heads) /
                      static_cast<size_t>(layout.head_dim);
  return static_cast<int>(slot / static_cast<size_t>(layout.page_size));
}

// Every element of [at, at + n) of `array` decodes to the poison: NaN for nan, else exactly
// +Inf, -Inf or the dtype's largest finite value.
void expect_poison(const cpu::DTypeArray& array, size_t at, size_t n, Poison poison,
                   const char* what) {
  std::vector<float> got(n);
  array.read(at, got.data(), n);
  const float want = poison == Poison::pos_inf   ? std::numeric_limits<float>::infinity()
                     : poison == Poison::neg_inf ? -std::numeric_limits<float>::infinity()
                                                 : max_finite(array.dtype());
  for (size_t i = 0; i < n; ++i) {
    if (poison == Poison::nan) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " element " << at + i << " = " << got[i];
    } else {
      ASSERT_EQ(got[i], want) << what << " element " << at + i;
    }
  }
}

TEST(PagedKvStore, FreshPoolIsPoisonAndReleasePoisonsAndIsReusedFirst) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(poison_name(poison)));
      const Layout layout = make_layout(
          {.kv_heads = 2, .head_dim = 3, .value_dim = 2, .page_size = 2, .dtype = dtype});
      const size_t k_page = 2 * 2 * 3, v_page = 2 * 2 * 2;  // page_size x kv_heads x dim
      const std::vector<int> order = {2, 0, 3, 1};
      cpu::PagedKvStore store(layout, 2, order, poison);
      ASSERT_EQ(store.keys().size(), 4 * k_page);
      ASSERT_EQ(store.values().size(), 4 * v_page);
      expect_poison(store.keys(), 0, store.keys().size(), poison, "fresh K");
      expect_poison(store.values(), 0, store.values().size(), poison, "fresh V");

      // Sequence 1 takes page 2 and keeps it; sequence 0 fills pages 0 and 3 completely.
      store.reserve(1, 1);
      const std::vector<float> k1 = {5, 6, 7, 8, 9, 10}, v1 = {11, 12, 13, 14};
      store.append(1, k1.data(), v1.data());
      store.reserve(0, 4);
      ASSERT_EQ(store.free_pages(), 1);
      for (int t = 0; t < 4; ++t) {
        std::vector<float> k(6), v(4);
        for (size_t i = 0; i < k.size(); ++i)
          k[i] = static_cast<float>(t) + 0.5f * static_cast<float>(i);
        for (size_t i = 0; i < v.size(); ++i)
          v[i] = -1.0f - static_cast<float>(t) - static_cast<float>(i);
        EXPECT_EQ(store.append(0, k.data(), v.data()), t);
      }
      const int first = page_of(store, layout, 0, 0), second = page_of(store, layout, 0, 2);
      ASSERT_EQ(first, 0);
      ASSERT_EQ(second, 3);
      ASSERT_EQ(page_of(store, layout, 1, 0), 2);
      // Finite data really was written to every element of both pages.
      for (int page : {first, second}) {
        std::vector<float> k(k_page), v(v_page);
        store.keys().read(static_cast<size_t>(page) * k_page, k.data(), k_page);
        store.values().read(static_cast<size_t>(page) * v_page, v.data(), v_page);
        for (float x : k) ASSERT_TRUE(std::isfinite(x));
        for (float x : v) ASSERT_TRUE(std::isfinite(x));
      }

      store.release(0);
      EXPECT_EQ(store.length(0), 0);
      EXPECT_EQ(store.capacity(0), 0);
      EXPECT_EQ(store.free_pages(), 3);
      for (int page : {first, second}) {
        expect_poison(store.keys(), static_cast<size_t>(page) * k_page, k_page, poison,
                      "released K");
        expect_poison(store.values(), static_cast<size_t>(page) * v_page, v_page, poison,
                      "released V");
      }
      // Sequence 1's page is untouched.
      std::vector<float> kept_k(6), kept_v(4);
      store.keys().read(store.k_offset(1, 0, 0), kept_k.data(), kept_k.size());
      store.values().read(store.v_offset(1, 0, 0), kept_v.data(), kept_v.size());
      EXPECT_EQ(kept_k, k1);
      EXPECT_EQ(kept_v, v1);

      // The next reserve hands out the released pages first (the sequence's first page
      // first), before page 1, which was never used.
      store.reserve(1, 2);  // sequence 1 needs a second page
      EXPECT_EQ(page_of(store, layout, 1, 2), first);
      store.reserve(0, 2);
      EXPECT_EQ(page_of(store, layout, 0, 0), second);
      store.reserve(0, 4);
      EXPECT_EQ(page_of(store, layout, 0, 2), 1);
    }
  }
}

TEST(PagedKvStore, PoolBeyondTheLimitIsAnEngineError) {
  // 4096 pages of 4096 slots x 1 kv head x (1 + 1) elements = kMaxPoolElements exactly.
  Layout layout = make_layout({.page_size = limits::kMaxPageSize, .dtype = DType::bf16});
  static_assert(int64_t{4096} * 4096 * 2 == limits::kMaxPoolElements);
  EXPECT_NO_THROW(cpu::PagedKvStore(layout, 1, identity_order(4096), Poison::nan));
  EXPECT_THROW(cpu::PagedKvStore(layout, 1, identity_order(4097), Poison::nan), EngineError);
  layout.page_size = 1;
  layout.kv_heads = limits::kMaxKvHeads;
  layout.head_dim = limits::kMaxHeadDim;
  layout.value_dim = limits::kMaxValueDim;
  EXPECT_NO_THROW(cpu::PagedKvStore(layout, 1, identity_order(256), Poison::nan));
  EXPECT_THROW(cpu::PagedKvStore(layout, 1, identity_order(257), Poison::nan), EngineError);
}

TEST(PagedEngine, MatchesContiguousBitForBit) {
  Layout layout = make_layout({.q_heads = 4,
                               .kv_heads = 2,
                               .head_dim = 6,
                               .value_dim = 3,
                               .page_size = 5,
                               .rope_theta = 10000.0,
                               .window = 9});
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    layout.dtype = dtype;
    const Data d = generated(layout, 30, 23, Distribution::uniform);
    auto paged = make_engine("paged", config_for(layout));
    auto contiguous = make_engine("contiguous", config_for(layout));
    expect_identical(feed_schedule(*paged, d, {7, 1, 12, 1, 9}),
                     feed_schedule(*contiguous, d, {7, 1, 12, 1, 9}));
  }
}

// ---------------------------------------------------------------------------------------
// Flash dispatch

TEST(FlashEngine, SplitDecodeRunsAndMatchesPaged) {
  const Layout layout = make_layout({.q_heads = 2,
                                     .kv_heads = 1,
                                     .head_dim = 8,
                                     .value_dim = 4,
                                     .page_size = 16,
                                     .rope_theta = 10000.0});
  const Data d = generated(layout, 110, 29, Distribution::uniform);
  cpu::FlashEngine flash(config_for(layout));
  auto paged = make_engine("paged", config_for(layout));
  std::vector<int> schedule{99};
  for (int i = 0; i < 11; ++i) schedule.push_back(1);  // contexts 100..110
  const ChunkOut f = feed_schedule(flash, d, schedule);
  const ChunkOut p = feed_schedule(*paged, d, schedule);
  EXPECT_EQ(flash.path_counts().split_decode, 11 * layout.q_heads);
  EXPECT_EQ(flash.path_counts().decode, 0);
  EXPECT_EQ(flash.path_counts().prefill, 99 * layout.q_heads);
  ASSERT_EQ(f.positions, p.positions);
  for (size_t i = 0; i < f.out.size(); ++i) {
    EXPECT_NEAR(f.out[i], p.out[i], 1e-5 * std::max(1.0f, std::fabs(p.out[i]))) << i;
  }
  expect_rows_near(f, attention(d, 0, 110), 0, 1e-5, d);
}

TEST(FlashEngine, DispatchAroundTheSplitThreshold) {
  Layout layout = make_layout({.head_dim = 2, .page_size = 4});
  const int n = cpu::kFlashSplitThreshold + 1;
  const Data d = generated(layout, n, 31);
  cpu::FlashEngine flash(config_for(layout));
  // Prefill threshold - 2 tokens, then decodes that see threshold - 1, threshold, threshold + 1.
  const ChunkOut got = feed_schedule(flash, d, {n - 3, 1, 1, 1});
  EXPECT_EQ(flash.path_counts().prefill, n - 3);
  EXPECT_EQ(flash.path_counts().decode, 1);        // sees threshold - 1 keys
  EXPECT_EQ(flash.path_counts().split_decode, 2);  // sees threshold, threshold + 1
  expect_rows_near(got, attention(d, 0, n), 0, 1e-5, d);

  // A window below the threshold keeps long decodes on the single pass.
  layout.window = cpu::kFlashSplitThreshold - 1;
  const Data w = generated(layout, 80, 33);
  cpu::FlashEngine windowed(config_for(layout));
  const ChunkOut wgot = feed_schedule(windowed, w, {70, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(windowed.path_counts().split_decode, 0);
  EXPECT_EQ(windowed.path_counts().decode, 10);
  expect_rows_near(wgot, attention(w, 0, 80), 0, 1e-5, w);
}

// ---------------------------------------------------------------------------------------
// Mutants: each gives its predicted wrong answer on the matching scenario

TEST(Mutant, MaskOriginRestartsAtTheChunk) {
  const Data d = worked();
  auto engine = make_engine("mask-origin", config_for(d.layout));
  feed(*engine, d, 0, 0, 3);
  const ChunkOut chunk = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(chunk.positions, (std::vector<int64_t>{3, 4}));  // positions stay right
  EXPECT_FLOAT_EQ(chunk.out[0], 2.0f);                       // instead of 7.5
  EXPECT_FLOAT_EQ(chunk.out[1], 3.0f);                       // instead of 12.4

  auto one = make_engine("mask-origin", config_for(d.layout));
  feed(*one, d, 0, 0, 1);
  const ChunkOut decode = feed(*one, d, 0, 1, 1);
  EXPECT_EQ(decode.positions, (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(decode.out[0], 2.0f);  // instead of 3
}

TEST(Mutant, StalePositionContinuesAfterReset) {
  const Data d = worked();
  auto engine = make_engine("stale-position", config_for(d.layout));
  feed(*engine, d, 0, 0, 3);  // request A: n_A = 3
  engine->reset(0);
  const ChunkOut b = feed(*engine, d, 0, 3, 2);
  EXPECT_EQ(b.positions, (std::vector<int64_t>{3, 4}));  // instead of 0, 1
  EXPECT_FLOAT_EQ(b.out[0], 16.0f);                      // values are unaffected
  EXPECT_FLOAT_EQ(b.out[1], 24.0f);
}

TEST(Mutant, StaleKvAttendsToTheOldRequest) {
  const Data d = worked();
  auto engine = make_engine("stale-kv", config_for(d.layout));
  feed(*engine, d, 0, 0, 3);  // request A: 2, 4, 8
  engine->reset(0);
  const ChunkOut b = feed(*engine, d, 0, 3, 2);  // request B: 16, 32
  EXPECT_EQ(b.positions, (std::vector<int64_t>{0, 1}));
  EXPECT_FLOAT_EQ(b.out[0], (2 + 4 + 8 + 16) / 4.0f);       // (sum A + vB0) / (n_A + 1)
  EXPECT_FLOAT_EQ(b.out[1], (2 + 4 + 8 + 16 + 32) / 5.0f);  // instead of 16 and 24
}

TEST(Mutant, PageTailReadSeesThePoison) {
  const Data d = worked(8);
  Layout layout = d.layout;
  layout.page_size = 4;
  auto engine = make_engine("page-tail-read", config_for(layout));
  const ChunkOut prefill = feed(*engine, d, 0, 0, 2);  // prefill stays right
  EXPECT_FLOAT_EQ(prefill.out[1], 3.0f);
  const ChunkOut decode = feed(*engine, d, 0, 2, 1);  // slot 3 of page 0 still poisoned
  EXPECT_TRUE(std::isnan(decode.out[0]));
  // With huge poison the row is huge instead of 14/3.
  auto huge = make_engine("page-tail-read", config_for(layout, 1, 64, {}, Poison::huge));
  feed(*huge, d, 0, 0, 2);
  EXPECT_GT(feed(*huge, d, 0, 2, 1).out[0], 1e30f);
  // A decode that fills its page exactly reads no tail: the same as honest.
  const ChunkOut full = feed(*engine, d, 0, 3, 1);
  EXPECT_FLOAT_EQ(full.out[0], 7.5f);
}

TEST(Mutant, WrongKvHeadSwapsHeadsUnderGqa) {
  const Layout layout = make_layout({.q_heads = 4, .kv_heads = 2});
  Data d{layout, 2, {}, {}, {}};
  for (float t : {0.0f, 1.0f}) {
    d.q.insert(d.q.end(), {0, 0, 0, 0});
    d.k.insert(d.k.end(), {0, 0});
    d.v.insert(d.v.end(), {1.0f + t, 10.0f + t});  // kv head 0: 1, 2; kv head 1: 10, 11
  }
  auto honest = make_engine("flash", config_for(layout));
  auto mutant = make_engine("wrong-kv-head", config_for(layout));
  const ChunkOut want = feed(*honest, d, 0, 0, 2);
  const ChunkOut got = feed(*mutant, d, 0, 0, 2);
  EXPECT_EQ(want.out, (std::vector<float>{1, 1, 10, 10, 1.5f, 1.5f, 10.5f, 10.5f}));
  EXPECT_EQ(got.out, (std::vector<float>{1, 10, 1, 10, 1.5f, 10.5f, 1.5f, 10.5f}));
  EXPECT_EQ(got.out[1], want.out[2]);  // q head 1 gets what q head 2 should get

  // MHA and MQA: the mapping coincides, the mutant is honest there.
  for (int kv_heads : {4, 1}) {
    Layout l = layout;
    l.kv_heads = kv_heads;
    l.head_dim = 2;
    const Data g = generated(l, 9, 37);
    auto a = make_engine("flash", config_for(l));
    auto b = make_engine("wrong-kv-head", config_for(l));
    expect_identical(feed_schedule(*a, g, {5, 1, 3}), feed_schedule(*b, g, {5, 1, 3}));
  }
}

// ---------------------------------------------------------------------------------------
// Through check.h: prepare(scenario) + judge_engine(scenario, prepared, engine)

std::vector<int> ids(int first, int count) {
  std::vector<int> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

// Appends tokens [first, first + sum(sizes)) to seq, one op per chunk size.
void append_schedule(std::vector<Op>& program, int seq, int first, const std::vector<int>& sizes) {
  for (int size : sizes) {
    program.push_back(Op::append(seq, ids(first, size)));
    first += size;
  }
}

Scenario make_scenario(std::string name, const Layout& layout, TokenSource tokens,
                       std::vector<Op> program, int sequences = 1, Placement placement = {}) {
  Scenario s;
  s.name = std::move(name);
  s.layout = layout;
  s.tokens = std::move(tokens);
  s.sequences = sequences;
  s.program = std::move(program);
  s.placement = std::move(placement);
  return s;
}

// The worked example's tokens: q = k = 0, values 2, 4, 8, ... (n of them).
std::vector<ExplicitToken> worked_tokens(int n) {
  std::vector<ExplicitToken> tokens;
  for (int t = 0; t < n; ++t) tokens.push_back({{{0.0}}, {{0.0}}, {{std::ldexp(1.0, t + 1)}}});
  return tokens;
}

Layout tiny_layout(int page_size = 4) {
  return make_layout({.page_size = page_size});
}

Scenario worked_scenario() {
  return make_scenario("worked-example", tiny_layout(), worked_tokens(5),
                       {Op::append(0, {0, 1, 2}), Op::append(0, {3, 4})});
}

Scenario one_token_cache_scenario() {
  return make_scenario("one-token-cache", tiny_layout(), worked_tokens(3),
                       {Op::append(0, {0}), Op::append(0, {1}), Op::append(0, {2})});
}

Scenario reset_scenario() {
  return make_scenario("reset-two-requests", tiny_layout(), worked_tokens(5),
                       {Op::append(0, {0, 1, 2}), Op::reset(0), Op::append(0, {3, 4})});
}

Scenario page_tail_scenario(Poison poison) {
  Placement placement;
  placement.poison = poison;
  return make_scenario("poisoned-page-tail", tiny_layout(), worked_tokens(3),
                       {Op::append(0, {0, 1}), Op::append(0, {2})}, 1, placement);
}

Scenario gqa_scenario(int kv_heads) {
  const Layout l = make_layout(
      {.q_heads = 4, .kv_heads = kv_heads, .head_dim = 4, .value_dim = 3, .page_size = 3});
  std::vector<Op> program;
  append_schedule(program, 0, 0, {5, 1, 1, 6, 1});
  return make_scenario("gqa", l, GeneratedTokens{41, 14, Distribution::dyadic, false}, program);
}

Scenario multistep_scenario(DType dtype, std::optional<int> window, Placement placement) {
  const Layout l = make_layout({.q_heads = 2,
                                .kv_heads = 1,
                                .head_dim = 4,
                                .value_dim = 2,
                                .page_size = 3,
                                .dtype = dtype,
                                .rope_theta = 10000.0,
                                .window = window});
  std::vector<Op> program;
  program.push_back(Op::append(0, ids(0, 4)));
  program.push_back(Op::step({Chunk{1, ids(4, 2)}, Chunk{0, ids(6, 1)}, Chunk{2, ids(7, 9)}}));
  program.push_back(Op::reset(1));
  program.push_back(Op::step({Chunk{1, ids(16, 5)}, Chunk{2, ids(21, 1)}}));
  for (int i = 0; i < 45; ++i) program.push_back(Op::append(2, {22 + i}));  // past the split
  program.push_back(Op::reset(0));
  program.push_back(Op::step({Chunk{0, ids(67, 3)}, Chunk{1, ids(70, 1)}}));
  return make_scenario("multistep", l, GeneratedTokens{43, 71, Distribution::dyadic, false},
                       program, 3, placement);
}

Scenario long_context_scenario(DType dtype, Distribution distribution, bool rope) {
  Layout l = make_layout({.q_heads = 2,
                          .kv_heads = 1,
                          .head_dim = 8,
                          .value_dim = 4,
                          .page_size = 16,
                          .dtype = dtype});
  if (rope) l.rope_theta = 10000.0;
  std::vector<Op> program;
  append_schedule(program, 0, 0, {600, 1, 1, 450, 1, 1, 7, 1, 1, 1});
  return make_scenario("long-context", l, GeneratedTokens{47, 1064, distribution, false}, program);
}

std::string describe(const Verdict& verdict) {
  if (verdict.pass || !verdict.first) return "pass";
  const Divergence& d = *verdict.first;
  return std::string(failure_kind_name(d.kind)) + " at " + to_string(d.key) + " q head " +
         std::to_string(d.q_head) + " dim " + std::to_string(d.dim) + ": got " +
         std::to_string(d.got) + ", expected " + std::to_string(d.expected) + " (bound " +
         std::to_string(d.bound) + ") " + d.detail;
}

bool passes(const Scenario& scenario, const std::string& engine, std::string* why = nullptr) {
  const Prepared prepared = prepare(scenario);
  const CheckOutcome outcome = judge_engine(scenario, prepared, *find_engine(engine));
  if (why != nullptr) *why = describe(outcome.verdict);
  return outcome.verdict.pass;
}

CheckOutcome check(const Scenario& scenario, const std::string& engine) {
  return judge_engine(scenario, prepare(scenario), *find_engine(engine));
}

std::vector<Scenario> honest_scenarios() {
  std::vector<Scenario> all{worked_scenario(), one_token_cache_scenario(), reset_scenario(),
                            gqa_scenario(2), gqa_scenario(1)};
  for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    all.push_back(page_tail_scenario(poison));
  }
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (std::optional<int> window : {std::optional<int>{}, std::optional<int>{5}}) {
      for (PageOrder order : {PageOrder::identity, PageOrder::reversed}) {
        Placement placement;
        placement.order = order;
        placement.poison = order == PageOrder::identity ? Poison::nan : Poison::huge;
        all.push_back(multistep_scenario(dtype, window, placement));
      }
    }
  }
  // Long contexts, RoPE on: every dtype, uniform and wide data.
  all.push_back(long_context_scenario(DType::f32, Distribution::uniform, true));
  all.push_back(long_context_scenario(DType::f32, Distribution::wide, true));
  all.push_back(long_context_scenario(DType::f16, Distribution::uniform, true));
  all.push_back(long_context_scenario(DType::bf16, Distribution::wide, true));
  return all;
}

// Prepared once for all engines: the long-context references dominate the cost.
const std::vector<std::pair<Scenario, Prepared>>& prepared_honest_scenarios() {
  static const auto all = [] {
    std::vector<std::pair<Scenario, Prepared>> out;
    for (Scenario& scenario : honest_scenarios()) {
      Prepared prepared = prepare(scenario);
      out.emplace_back(std::move(scenario), std::move(prepared));
    }
    return out;
  }();
  return all;
}

TEST_P(HonestEngine, PassesCheckEngineOnEveryScenario) {
  for (const auto& [scenario, prepared] : prepared_honest_scenarios()) {
    const CheckOutcome outcome = judge_engine(scenario, prepared, *find_engine(GetParam()));
    EXPECT_TRUE(outcome.verdict.pass) << scenario.name << ": " << describe(outcome.verdict) << " ("
                                      << poison_name(scenario.placement.poison) << ", "
                                      << dtype_name(scenario.layout.dtype) << ")";
  }
}

TEST_P(HonestEngine, PassesGeneratedScenarios) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    PrngChoiceSource choices(seed);
    const Scenario scenario = generate_scenario(choices);
    std::string why;
    ASSERT_TRUE(passes(scenario, GetParam(), &why)) << "seed " << seed << ": " << why;
  }
}

TEST(MutantCheck, EachFailsItsMatchingScenario) {
  {
    const CheckOutcome o = check(worked_scenario(), "mask-origin");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::mismatch);
    EXPECT_EQ(o.verdict.first->key, (RowKey{0, 0, 3}));
    EXPECT_FLOAT_EQ(static_cast<float>(o.verdict.first->got), 2.0f);
    EXPECT_DOUBLE_EQ(o.verdict.first->expected, 7.5);
    EXPECT_FALSE(passes(one_token_cache_scenario(), "mask-origin"));
  }
  {
    const CheckOutcome o = check(reset_scenario(), "stale-kv");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::mismatch);
    EXPECT_EQ(o.verdict.first->key, (RowKey{0, 1, 0}));
    EXPECT_FLOAT_EQ(static_cast<float>(o.verdict.first->got), 7.5f);
    EXPECT_DOUBLE_EQ(o.verdict.first->expected, 16.0);
  }
  {
    const CheckOutcome o = check(reset_scenario(), "stale-position");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::wrong_position)
        << failure_kind_name(o.verdict.first->kind);
  }
  for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    const CheckOutcome o = check(page_tail_scenario(poison), "page-tail-read");
    ASSERT_FALSE(o.verdict.pass) << poison_name(poison);
    EXPECT_EQ(o.verdict.first->key, (RowKey{0, 0, 2})) << poison_name(poison);
  }
  EXPECT_EQ(check(page_tail_scenario(Poison::nan), "page-tail-read").verdict.first->kind,
            FailureKind::not_finite);
  {
    const CheckOutcome o = check(gqa_scenario(2), "wrong-kv-head");
    ASSERT_FALSE(o.verdict.pass);
    EXPECT_EQ(o.verdict.first->kind, FailureKind::mismatch);
    EXPECT_EQ(o.verdict.first->q_head, 1);
    EXPECT_TRUE(passes(gqa_scenario(1), "wrong-kv-head"));  // MQA: the mapping coincides
  }
}

TEST(MutantCheck, EveryMutantIsKilledByGeneratedScenarios) {
  for (const EngineInfo& info : engine_registry()) {
    if (!info.mutant) continue;
    int killed = 0;
    for (uint64_t seed = 1; seed <= 300 && killed == 0; ++seed) {
      PrngChoiceSource choices(seed);
      if (!passes(generate_scenario(choices), info.name)) ++killed;
    }
    EXPECT_GT(killed, 0) << info.name;
  }
}

// ---------------------------------------------------------------------------------------
// Truncate and fork, directly on the engines

// The tokens `stream` (ids into d) as one token-major stream.
Data gather(const Data& d, const std::vector<int>& stream) {
  Data g{d.layout, static_cast<int>(stream.size()), {}, {}, {}};
  const auto take = [](std::vector<float>& out, const std::vector<float>& in, size_t stride,
                       int t) {
    const auto at = in.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(t) * stride);
    out.insert(out.end(), at, at + static_cast<std::ptrdiff_t>(stride));
  };
  for (int t : stream) {
    take(g.q, d.q, d.qs(), t);
    take(g.k, d.k, d.ks(), t);
    take(g.v, d.v, d.vs(), t);
  }
  return g;
}

std::vector<int> joined(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void add_rows(ChunkOut& all, const ChunkOut& o) {
  all.out.insert(all.out.end(), o.out.begin(), o.out.end());
  all.positions.insert(all.positions.end(), o.positions.begin(), o.positions.end());
}

// The rows a fresh engine gives for `stream` (ids into d): the first `prefix` tokens as one
// chunk (rows dropped), then chunks of `sizes` (rows kept).
ChunkOut fresh_rows(const std::string& name, const Layout& layout, const Data& d,
                    const std::vector<int>& stream, int prefix, const std::vector<int>& sizes) {
  const Data g = gather(d, stream);
  auto engine = make_engine(name, config_for(layout));
  if (prefix > 0) feed(*engine, g, 0, 0, prefix);
  ChunkOut all;
  int first = prefix;
  for (int size : sizes) {
    add_rows(all, feed(*engine, g, 0, first, size));
    first += size;
  }
  return all;
}

// `got` holds the rows of the last got.positions.size() tokens of `stream` (ids into d):
// compared with full-prefix attention in double over the stream.
void expect_stream_rows(const ChunkOut& got, const Data& d, const std::vector<int>& stream) {
  const Data g = gather(d, stream);
  const auto n = static_cast<int64_t>(stream.size());
  expect_rows_near(got, attention(g, 0, static_cast<int>(n)),
                   n - static_cast<int64_t>(got.positions.size()), 1e-5, g);
}

// GQA, RoPE (a wrong position changes every value), pages of 4.
Layout fork_layout() {
  return make_layout({.q_heads = 4,
                      .kv_heads = 2,
                      .head_dim = 4,
                      .value_dim = 3,
                      .page_size = 4,
                      .rope_theta = 10000.0});
}

TEST(Capabilities, EveryBuiltInEngineAnnouncesTruncateAndFork) {
  const Layout layout;
  for (const EngineInfo& info : engine_registry()) {
    const EngineCapabilities caps = info.make(config_for(layout))->capabilities();
    EXPECT_TRUE(caps.truncate) << info.name;
    EXPECT_TRUE(caps.fork) << info.name;
  }
}

TEST_P(HonestEngine, TruncateThenAppendMatchesFreshEngine) {
  const Layout layout = fork_layout();
  const Data d = generated(layout, 40, 51);
  // Seq 0 holds 10 tokens (pages of 4): keep 0, into the first page, onto a page boundary,
  // into the middle of a later page, one before the length, the length itself (a no-op).
  for (int keep : {0, 1, 3, 4, 6, 8, 9, 10}) {
    SCOPED_TRACE("keep " + std::to_string(keep));
    auto engine = make(layout, 2);
    feed(*engine, d, 1, 30, 5);  // a neighbour, so the pages interleave
    feed(*engine, d, 0, 0, 7);
    feed(*engine, d, 1, 35, 2);
    feed(*engine, d, 0, 7, 3);
    engine->truncate(0, keep);
    const std::vector<int> stream = joined(ids(0, keep), ids(20, 5));
    ChunkOut got;
    add_rows(got, feed(*engine, d, 0, 20, 3));
    add_rows(got, feed(*engine, d, 0, 23, 1));
    add_rows(got, feed(*engine, d, 0, 24, 1));
    expect_identical(got, fresh_rows(GetParam(), layout, d, stream, keep, {3, 1, 1}));
    expect_stream_rows(got, d, stream);
    // The neighbour is untouched.
    expect_stream_rows(feed(*engine, d, 1, 37, 1), d, ids(30, 8));
  }
}

TEST_P(HonestEngine, TruncateRepeatedlyAndAfterDecodes) {
  const Layout layout = fork_layout();
  const Data d = generated(layout, 60, 53);
  auto engine = make(layout);
  std::vector<int> stream;
  int next = 0;
  const auto grow = [&](int n) {
    const ChunkOut o = feed(*engine, d, 0, next, n);
    stream = joined(stream, ids(next, n));
    next += n;
    expect_stream_rows(o, d, stream);
  };
  const auto cut = [&](int keep) {
    engine->truncate(0, keep);
    stream.resize(static_cast<size_t>(keep));
  };
  grow(10);
  cut(6);
  for (int i = 0; i < 3; ++i) grow(1);
  cut(5);
  cut(5);  // no-op
  grow(4);
  cut(8);  // onto a page boundary
  grow(1);
  cut(0);
  cut(0);
  grow(2);
  cut(1);
  grow(6);
}

TEST_P(HonestEngine, ForkThenGrowingBothMatchesFreshEngines) {
  const Layout layout = fork_layout();
  const Data d = generated(layout, 60, 55);
  // The source's length: empty, a partial first page, one full page, a partial second
  // page, two full pages.
  for (int len : {0, 3, 4, 6, 8}) {
    for (bool dst_held_tokens : {false, true}) {
      SCOPED_TRACE("source length " + std::to_string(len) + (dst_held_tokens ? ", dst held" : ""));
      auto engine = make(layout, 3);
      if (dst_held_tokens) feed(*engine, d, 1, 40, 5);
      if (len > 0) feed(*engine, d, 0, 0, len);
      feed(*engine, d, 2, 50, 3);  // a bystander
      engine->fork(0, 1);
      // Both grow, in the same steps and alone: src by d[10, 15), dst by d[20, 27).
      ChunkOut src_rows, dst_rows;
      auto outs = step(*engine, d, {Feed{0, 10, 3}, Feed{1, 20, 2}});
      add_rows(src_rows, outs[0]);
      add_rows(dst_rows, outs[1]);
      outs = step(*engine, d, {Feed{1, 22, 1}, Feed{0, 13, 1}});
      add_rows(dst_rows, outs[0]);
      add_rows(src_rows, outs[1]);
      add_rows(dst_rows, feed(*engine, d, 1, 23, 4));
      add_rows(src_rows, feed(*engine, d, 0, 14, 1));
      const std::vector<int> src_stream = joined(ids(0, len), ids(10, 5));
      const std::vector<int> dst_stream = joined(ids(0, len), ids(20, 7));
      expect_identical(src_rows, fresh_rows(GetParam(), layout, d, src_stream, len, {3, 1, 1}));
      expect_identical(dst_rows, fresh_rows(GetParam(), layout, d, dst_stream, len, {2, 1, 4}));
      expect_stream_rows(src_rows, d, src_stream);
      expect_stream_rows(dst_rows, d, dst_stream);
      expect_stream_rows(feed(*engine, d, 2, 53, 1), d, ids(50, 4));
    }
  }
}

TEST_P(HonestEngine, ForkChainsTruncatesAndResetsKeepEveryStream) {
  const Layout layout = fork_layout();
  const Data d = generated(layout, 80, 57);
  auto engine = make(layout, 3);
  std::vector<std::vector<int>> streams(3);
  int next = 0;
  const auto grow = [&](int seq, int n) {
    const ChunkOut o = feed(*engine, d, seq, next, n);
    auto& stream = streams[static_cast<size_t>(seq)];
    stream = joined(stream, ids(next, n));
    next += n;
    expect_stream_rows(o, d, streams[static_cast<size_t>(seq)]);
  };
  const auto fork = [&](int src, int dst) {
    engine->fork(src, dst);
    streams[static_cast<size_t>(dst)] = streams[static_cast<size_t>(src)];
  };
  const auto cut = [&](int seq, int keep) {
    engine->truncate(seq, keep);
    streams[static_cast<size_t>(seq)].resize(static_cast<size_t>(keep));
  };
  grow(0, 9);
  fork(0, 1);  // shares two full pages, copies the partial third
  cut(1, 6);   // into the shared second page: copied, the source keeps its slots 6, 7
  grow(0, 2);
  grow(1, 3);
  fork(1, 2);  // a fork of a fork
  engine->reset(0);
  grow(2, 1);
  cut(2, 4);  // onto a page boundary: the shared page beyond is dropped, not copied
  grow(2, 5);
  grow(1, 1);
  fork(2, 0);
  cut(2, 0);
  grow(0, 2);
  grow(2, 3);
  fork(0, 1);  // onto a destination that shares pages with the source
  grow(1, 1);
  grow(0, 1);
}

TEST_P(HonestEngine, TruncateAndForkErrorsAreEngineErrors) {
  const Data d = worked(8);
  auto engine = make(d.layout, 2);
  feed(*engine, d, 0, 0, 3);
  EXPECT_THROW(engine->truncate(0, 4), EngineError);
  EXPECT_THROW(engine->truncate(0, -1), EngineError);
  EXPECT_THROW(engine->truncate(1, 1), EngineError);  // sequence 1 is empty
  EXPECT_THROW(engine->truncate(2, 0), EngineError);
  EXPECT_THROW(engine->truncate(-1, 0), EngineError);
  EXPECT_THROW(engine->fork(0, 0), EngineError);
  EXPECT_THROW(engine->fork(0, 2), EngineError);
  EXPECT_THROW(engine->fork(2, 0), EngineError);
  EXPECT_THROW(engine->fork(-1, 1), EngineError);
  // Nothing changed: the next token is at position 3 and sees 2, 4, 8.
  const ChunkOut next = feed(*engine, d, 0, 3, 1);
  EXPECT_EQ(next.positions, (std::vector<int64_t>{3}));
  EXPECT_FLOAT_EQ(next.out[0], 7.5f);
  EXPECT_NO_THROW(engine->truncate(1, 0));  // keep 0 of an empty sequence
}

// A deterministic random program of appends, batched steps, resets, truncates and forks
// over three sequences: every row against full-prefix attention over its logical stream;
// for the paged engines, the pool's invariants after every op.
void expect_store_invariants(const cpu::PagedKvStore& store, const Layout& layout, int sequences,
                             Poison poison);

TEST_P(HonestEngine, RandomTruncateForkProgramsMatchTheReference) {
  Layout layout = fork_layout();
  layout.page_size = 3;
  const Data d = generated(layout, 400, 59);
  const int sequences = 3;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::vector<int> order = identity_order(48);
    std::reverse(order.begin(), order.end());
    auto engine = make(layout, sequences, 0, order, Poison::huge);
    const auto* paged = dynamic_cast<const cpu::PagedStorageEngine*>(engine.get());
    Xoshiro256 rng(seed);
    std::vector<std::vector<int>> streams(sequences);
    int next = 0;
    for (int op = 0; op < 50 && next < 380; ++op) {
      const auto seq = static_cast<int>(rng.between(0, sequences - 1));
      auto& stream = streams[static_cast<size_t>(seq)];
      const int64_t kind = stream.size() > 24 ? 2 : rng.between(0, 5);
      if (kind <= 1) {  // append, or a step with another sequence
        const auto n = static_cast<int>(rng.between(1, 5));
        std::vector<Feed> feeds{Feed{seq, next, n}};
        next += n;
        const int other = (seq + 1) % sequences;
        if (kind == 1) {
          feeds.push_back(Feed{other, next, 1});
          ++next;
        }
        const std::vector<ChunkOut> outs = step(*engine, d, feeds);
        for (size_t i = 0; i < feeds.size(); ++i) {
          auto& s = streams[static_cast<size_t>(feeds[i].seq)];
          s = joined(s, ids(feeds[i].first, feeds[i].count));
          expect_stream_rows(outs[i], d, s);
        }
      } else if (kind == 2) {
        const auto keep = static_cast<int>(rng.between(0, static_cast<int64_t>(stream.size())));
        engine->truncate(seq, keep);
        stream.resize(static_cast<size_t>(keep));
      } else if (kind == 3) {
        engine->reset(seq);
        stream.clear();
      } else {
        const int dst = (seq + static_cast<int>(rng.between(1, sequences - 1))) % sequences;
        engine->fork(seq, dst);
        streams[static_cast<size_t>(dst)] = stream;
      }
      if (paged != nullptr) expect_store_invariants(paged->kv(), layout, sequences, Poison::huge);
      if (HasFatalFailure()) return;
    }
  }
}

// ---------------------------------------------------------------------------------------
// PagedKvStore: reference counts, copy-on-write, poison, accounting

// The invariants of the pool: each page's count is the number of block tables holding it;
// the free pages are exactly those with count 0; no table holds a page twice; every slot
// outside every sequence's valid prefix (free pages included) holds the poison.
void expect_store_invariants(const cpu::PagedKvStore& store, const Layout& layout, int sequences,
                             Poison poison) {
  const auto ps = static_cast<size_t>(layout.page_size);
  const auto pool = static_cast<size_t>(store.pool_pages());
  std::vector<int> holders(pool, 0);
  std::vector<char> valid(pool * ps, 0);
  for (int s = 0; s < sequences; ++s) {
    const std::span<const int> pages = store.pages(s);
    ASSERT_GE(store.capacity(s), store.length(s));
    std::vector<int> sorted(pages.begin(), pages.end());
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "seq " << s;
    for (size_t i = 0; i < pages.size(); ++i) {
      const auto page = static_cast<size_t>(pages[i]);
      ++holders[page];
      for (size_t j = 0; j < ps; ++j) {
        if (static_cast<int64_t>(i * ps + j) < store.length(s)) valid[page * ps + j] = 1;
      }
    }
  }
  int free = 0;
  for (size_t page = 0; page < pool; ++page) {
    ASSERT_EQ(store.refcount(static_cast<int>(page)), holders[page]) << "page " << page;
    free += holders[page] == 0 ? 1 : 0;
  }
  ASSERT_EQ(store.free_pages(), free);
  const auto heads = static_cast<size_t>(layout.kv_heads);
  const auto hd = static_cast<size_t>(layout.head_dim), vd = static_cast<size_t>(layout.value_dim);
  for (size_t slot = 0; slot < pool * ps; ++slot) {
    if (valid[slot]) continue;
    const std::string where = "slot " + std::to_string(slot);
    expect_poison(store.keys(), slot * heads * hd, heads * hd, poison, where.c_str());
    expect_poison(store.values(), slot * heads * vd, heads * vd, poison, where.c_str());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Store tests: 2 kv heads, head_dim 3, value_dim 2, pages of 4; token t of a sequence
// tagged `tag` has k[i] = tag + 8t + i, v[i] = -(tag + 8t + i).
class StoreTest : public ::testing::Test {
 protected:
  static Layout store_layout() {
    return make_layout(
        {.q_heads = 2, .kv_heads = 2, .head_dim = 3, .value_dim = 2, .page_size = 4});
  }
  static std::vector<int> shuffled(int pages) {
    std::vector<int> order = identity_order(pages);
    for (size_t i = 0; i < order.size(); ++i)
      std::swap(order[i], order[(i * 5 + 2) % order.size()]);
    return order;
  }

  void append(cpu::PagedKvStore& store, int seq, int n, float tag) {
    for (int i = 0; i < n; ++i) {
      const auto t = static_cast<float>(store.length(seq));
      std::vector<float> k(6), v(4);
      for (size_t e = 0; e < k.size(); ++e) k[e] = tag + 8 * t + static_cast<float>(e);
      for (size_t e = 0; e < v.size(); ++e) v[e] = -(tag + 8 * t + static_cast<float>(e));
      store.reserve(seq, 1);
      store.append(seq, k.data(), v.data());
    }
  }
  // Slot `pos` of `seq` holds the token written with `tag` at position pos.
  void expect_token(const cpu::PagedKvStore& store, int seq, int64_t pos, float tag) {
    std::vector<float> k(6), v(4);
    store.keys().read(store.k_offset(seq, pos, 0), k.data(), k.size());
    store.values().read(store.v_offset(seq, pos, 0), v.data(), v.size());
    const float base = tag + 8 * static_cast<float>(pos);
    for (size_t e = 0; e < k.size(); ++e) EXPECT_EQ(k[e], base + static_cast<float>(e)) << pos;
    for (size_t e = 0; e < v.size(); ++e) EXPECT_EQ(v[e], -(base + static_cast<float>(e))) << pos;
  }
  void check(const cpu::PagedKvStore& store) {
    expect_store_invariants(store, layout_, 3, Poison::nan);
  }

  Layout layout_ = store_layout();
};

TEST_F(StoreTest, ForkSharesFullPagesAndCopiesThePartialOne) {
  cpu::PagedKvStore store(layout_, 3, shuffled(12), Poison::nan);
  append(store, 0, 6, 100);
  append(store, 1, 5, 900);  // the destination held tokens: its pages are freed
  check(store);
  const int free_before = store.free_pages();
  store.fork(0, 1);
  check(store);
  ASSERT_EQ(store.length(1), 6);
  ASSERT_EQ(store.pages(1).size(), 2u);
  EXPECT_EQ(store.pages(1)[0], store.pages(0)[0]);  // the full page is shared
  EXPECT_EQ(store.refcount(store.pages(0)[0]), 2);
  EXPECT_NE(store.pages(1)[1], store.pages(0)[1]);  // the partial page is copied
  EXPECT_EQ(store.refcount(store.pages(0)[1]), 1);
  EXPECT_EQ(store.refcount(store.pages(1)[1]), 1);
  EXPECT_EQ(store.free_pages(), free_before + 2 - 1);  // dst's 2 pages back, 1 copy taken
  for (int64_t p = 0; p < 6; ++p) expect_token(store, 1, p, 100);
  // Appending to both: each writes its own partial page; nothing leaks across.
  append(store, 0, 1, 200);
  append(store, 1, 1, 300);
  check(store);
  expect_token(store, 0, 6, 200);
  expect_token(store, 1, 6, 300);
  append(store, 1, 3, 400);  // dst crosses into a new page of its own
  append(store, 0, 2, 500);
  check(store);
  for (int64_t p = 0; p < 6; ++p) {
    expect_token(store, 0, p, 100);
    expect_token(store, 1, p, 100);
  }
  expect_token(store, 0, 7, 500);
  expect_token(store, 1, 7, 400);
  expect_token(store, 1, 9, 400);
  // Resetting everything gives every page back, poisoned.
  for (int s = 0; s < 3; ++s) store.release(s);
  check(store);
  EXPECT_EQ(store.free_pages(), store.pool_pages());
}

TEST_F(StoreTest, TruncateIntoASharedPageCopiesIt) {
  cpu::PagedKvStore store(layout_, 3, shuffled(12), Poison::nan);
  append(store, 0, 8, 100);
  const int free_before = store.free_pages();
  store.fork(0, 1);  // two full pages: both shared, nothing copied
  check(store);
  EXPECT_EQ(store.free_pages(), free_before);
  const int page0 = store.pages(0)[0], page1 = store.pages(0)[1];
  EXPECT_EQ(store.refcount(page0), 2);
  EXPECT_EQ(store.refcount(page1), 2);

  store.truncate(1, 6);  // into the shared second page: dst gets a copy of slots 4, 5
  check(store);          // dst's copy holds the poison at slots 6, 7
  EXPECT_EQ(store.pages(1)[0], page0);
  EXPECT_NE(store.pages(1)[1], page1);
  EXPECT_EQ(store.refcount(page1), 1);
  EXPECT_EQ(store.free_pages(), free_before - 1);
  for (int64_t p = 0; p < 8; ++p) expect_token(store, 0, p, 100);  // the source is untouched
  for (int64_t p = 0; p < 6; ++p) expect_token(store, 1, p, 100);

  const int copy = store.pages(1)[1];
  store.truncate(1, 4);  // onto a page boundary: the copy is dropped, poisoned, reused first
  check(store);
  EXPECT_EQ(store.pages(1).size(), 1u);
  EXPECT_EQ(store.free_pages(), free_before);
  append(store, 2, 1, 700);
  EXPECT_EQ(store.pages(2)[0], copy);

  store.truncate(0, 2);  // the source truncates into the page it still shares with dst
  check(store);
  // The source drops page1 (count 0: poisoned, front of the free list), and its copy of
  // page0 takes exactly that page.
  EXPECT_EQ(store.pages(0)[0], page1);
  EXPECT_EQ(store.refcount(page0), 1);
  EXPECT_EQ(store.refcount(page1), 1);
  for (int64_t p = 0; p < 4; ++p) expect_token(store, 1, p, 100);
  for (int64_t p = 0; p < 2; ++p) expect_token(store, 0, p, 100);

  store.truncate(1, 0);
  store.truncate(0, 0);
  store.truncate(0, 0);
  check(store);
  store.release(2);
  check(store);
  EXPECT_EQ(store.free_pages(), store.pool_pages());
}

TEST_F(StoreTest, ExhaustedPoolRefusesForkAndTruncateAndChangesNothing) {
  cpu::PagedKvStore store(layout_, 3, identity_order(3), Poison::nan);
  append(store, 0, 6, 100);  // pages 0, 1
  store.fork(0, 1);          // shares page 0, copies page 1 into page 2: the pool is full
  check(store);
  ASSERT_EQ(store.free_pages(), 0);
  EXPECT_THROW(store.fork(0, 2), EngineError);  // needs a copy of the partial page
  EXPECT_THROW(store.reserve(0, 3), EngineError);
  check(store);
  EXPECT_EQ(store.length(2), 0);
  // A fork whose destination frees its own partial page can reuse it for the copy.
  EXPECT_NO_THROW(store.fork(0, 1));
  check(store);
  // Truncating dst into the shared page 0 needs a copy; dropping its own page 1 frees one.
  EXPECT_NO_THROW(store.truncate(1, 2));
  check(store);
  for (int64_t p = 0; p < 2; ++p) expect_token(store, 1, p, 100);

  cpu::PagedKvStore full(layout_, 2, identity_order(2), Poison::nan);
  append(full, 0, 8, 100);
  full.fork(0, 1);  // both pages shared, the pool is full
  EXPECT_THROW(full.truncate(1, 6), EngineError);
  expect_store_invariants(full, layout_, 2, Poison::nan);
  EXPECT_EQ(full.length(1), 8);
  EXPECT_EQ(full.refcount(full.pages(1)[1]), 2);
  full.release(0);      // now dst holds both pages alone
  full.truncate(1, 6);  // poisons slots 6, 7 in place: no copy needed
  expect_store_invariants(full, layout_, 2, Poison::nan);
  EXPECT_EQ(full.free_pages(), 0);
}

TEST_F(StoreTest, AppendIntoASharedPageCopiesItFirst) {
  // Honest engines never write a shared page; rewinding a forked sequence (what the
  // fork-restarts-positions mutant does) makes the next appends land in shared pages.
  cpu::PagedKvStore store(layout_, 3, shuffled(12), Poison::nan);
  append(store, 0, 8, 100);
  store.fork(0, 1);
  store.rewind_without_poisoning(1, 0);
  store.reserve(1, 5);  // slots 0..4 of dst: both shared pages are copied (empty copies)
  EXPECT_NE(store.pages(1)[0], store.pages(0)[0]);
  EXPECT_NE(store.pages(1)[1], store.pages(0)[1]);
  check(store);  // length 0: the copies are all poison
  append(store, 1, 5, 300);
  check(store);
  for (int64_t p = 0; p < 8; ++p) expect_token(store, 0, p, 100);
  for (int64_t p = 0; p < 5; ++p) expect_token(store, 1, p, 300);
  // append() copies by itself when the caller did not reserve.
  store.fork(0, 2);
  store.rewind_without_poisoning(2, 3);
  const std::vector<float> k(6, 1.0f), v(4, 2.0f);
  store.append(2, k.data(), v.data());
  EXPECT_NE(store.pages(2)[0], store.pages(0)[0]);
  for (int64_t p = 0; p < 8; ++p) expect_token(store, 0, p, 100);
}

TEST_F(StoreTest, BadArgumentsAreEngineErrors) {
  cpu::PagedKvStore store(layout_, 2, identity_order(4), Poison::nan);
  append(store, 0, 3, 100);
  EXPECT_THROW(store.truncate(0, 4), EngineError);
  EXPECT_THROW(store.truncate(0, -1), EngineError);
  EXPECT_THROW(store.truncate(2, 0), EngineError);
  EXPECT_THROW(store.fork(0, 0), EngineError);
  EXPECT_THROW(store.fork(0, 2), EngineError);
  EXPECT_THROW(store.fork(-1, 0), EngineError);
  EXPECT_THROW(store.reserve(0, -1), EngineError);
  EXPECT_THROW(store.rewind_without_poisoning(0, 4), EngineError);
  expect_store_invariants(store, layout_, 2, Poison::nan);
  EXPECT_EQ(store.length(0), 3);
}

// ---------------------------------------------------------------------------------------
// The truncate and fork mutants: each gives its predicted wrong answer

TEST(Mutant, TruncateKeepsPositionReportsTheOldLength) {
  const Data d = worked(6);
  auto engine = make_engine("truncate-keeps-position", config_for(d.layout));
  feed(*engine, d, 0, 0, 5);  // 2, 4, 8, 16, 32
  engine->truncate(0, 2);     // keep 2, 4
  const ChunkOut next = feed(*engine, d, 0, 5, 1);
  EXPECT_EQ(next.positions, (std::vector<int64_t>{5}));  // the old length instead of 2
  EXPECT_FLOAT_EQ(next.out[0], (2 + 4 + 64) / 3.0f);     // zero scores: values unaffected
  auto honest = make_engine("contiguous", config_for(d.layout));
  feed(*honest, d, 0, 0, 5);
  honest->truncate(0, 2);
  EXPECT_EQ(feed(*honest, d, 0, 5, 1).positions, (std::vector<int64_t>{2}));

  // With RoPE the new token is also rotated at the old length: its values are wrong too.
  const Layout layout = fork_layout();
  const Data g = generated(layout, 12, 61, Distribution::uniform);
  auto mutant = make_engine("truncate-keeps-position", config_for(layout));
  feed(*mutant, g, 0, 0, 9);
  mutant->truncate(0, 4);
  const ChunkOut got = feed(*mutant, g, 0, 9, 1);
  EXPECT_EQ(got.positions, (std::vector<int64_t>{9}));
  const ChunkOut want = fresh_rows("contiguous", layout, g, joined(ids(0, 4), ids(9, 1)), 4, {1});
  double diff = 0;
  for (size_t i = 0; i < got.out.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got.out[i] - want.out[i])));
  }
  EXPECT_GT(diff, 1e-2);
}

TEST(Mutant, ForkRestartsPositionsReportsTheChildFromZero) {
  for (int page_size : {4, 2}) {  // the source's pages: one partial / one full + one partial
    SCOPED_TRACE("page size " + std::to_string(page_size));
    Data d = worked(6);
    d.layout.page_size = page_size;
    auto engine = make_engine("fork-restarts-positions", config_for(d.layout, 2));
    feed(*engine, d, 0, 0, 3);  // 2, 4, 8
    engine->fork(0, 1);
    const ChunkOut child = feed(*engine, d, 1, 3, 2);          // 16, 32
    EXPECT_EQ(child.positions, (std::vector<int64_t>{0, 1}));  // instead of 3, 4
    EXPECT_FLOAT_EQ(child.out[0], 16.0f);                      // instead of 7.5
    EXPECT_FLOAT_EQ(child.out[1], 24.0f);                      // instead of 12.4
    // The parent is untouched: its next token sees 2, 4, 8 and itself.
    const ChunkOut parent = feed(*engine, d, 0, 5, 1);  // 64
    EXPECT_EQ(parent.positions, (std::vector<int64_t>{3}));
    EXPECT_FLOAT_EQ(parent.out[0], (2 + 4 + 8 + 64) / 4.0f);
  }
}

// ---------------------------------------------------------------------------------------
// Truncate and fork through check.h: the runner, the reference and the comparator

// The worked example rolled back: 2, 4, 8, 16, 32, keep 2, then 64 at position 2 and 128
// at position 3 of epoch 1: (2+4+64)/3 and (2+4+64+128)/4.
Scenario truncate_scenario() {
  return make_scenario(
      "truncate-rollback", tiny_layout(), worked_tokens(7),
      {Op::append(0, {0, 1, 2, 3, 4}), Op::truncate(0, 2), Op::append(0, {5}), Op::append(0, {6})});
}

// Sequence 0 takes 2, 4, 8; sequence 1 forks it (epoch 1, continuing at 3), then both
// append, sequence 1 twice.
Scenario fork_scenario(int page_size) {
  return make_scenario("fork-shared-prefix", tiny_layout(page_size), worked_tokens(6),
                       {Op::append(0, {0, 1, 2}), Op::fork(0, 1), Op::append(1, {3}),
                        Op::append(0, {4}), Op::append(1, {5})},
                       2);
}

// A deterministic random program over three sequences: appends, two-sequence steps,
// resets, truncates (anywhere in [0, length]) and forks; GQA, RoPE, pages of 3.
Scenario random_truncate_fork_scenario(uint64_t seed, DType dtype, Placement placement) {
  Layout l = fork_layout();
  l.page_size = 3;
  l.dtype = dtype;
  Xoshiro256 rng(seed);
  std::vector<int64_t> length(3, 0);
  std::vector<Op> program{Op::append(0, ids(0, 4))};
  length[0] = 4;
  int next = 4;
  for (int op = 0; op < 24; ++op) {
    const auto seq = static_cast<int>(rng.between(0, 2));
    const auto s = static_cast<size_t>(seq);
    const int64_t kind = length[s] > 20 ? 2 : rng.between(0, 5);
    if (kind == 0) {
      const auto n = static_cast<int>(rng.between(1, 5));
      program.push_back(Op::append(seq, ids(next, n)));
      next += n;
      length[s] += n;
    } else if (kind == 1) {
      const int other = (seq + 1) % 3;
      const auto n = static_cast<int>(rng.between(1, 4));
      program.push_back(Op::step({Chunk{seq, ids(next, n)}, Chunk{other, ids(next + n, 1)}}));
      next += n + 1;
      length[s] += n;
      length[static_cast<size_t>(other)] += 1;
    } else if (kind == 2) {
      const int64_t keep = rng.between(0, length[s]);
      program.push_back(Op::truncate(seq, keep));
      length[s] = keep;
    } else if (kind == 3) {
      program.push_back(Op::reset(seq));
      length[s] = 0;
    } else {
      const int dst = (seq + static_cast<int>(rng.between(1, 2))) % 3;
      program.push_back(Op::fork(seq, dst));
      length[static_cast<size_t>(dst)] = length[s];
    }
  }
  return make_scenario("random-truncate-fork-" + std::to_string(seed), l,
                       GeneratedTokens{seed, next, Distribution::dyadic, false}, program, 3,
                       std::move(placement));
}

TEST_P(HonestEngine, PassesTruncateAndForkScenarios) {
  std::vector<Scenario> all{truncate_scenario(), fork_scenario(4), fork_scenario(2),
                            fork_scenario(1)};
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Placement placement;
    placement.order = seed % 2 == 0 ? PageOrder::reversed : PageOrder::identity;
    placement.poison = seed % 3 == 0 ? Poison::huge : Poison::nan;
    const DType dtype = seed % 5 == 0 ? DType::bf16 : seed % 5 == 1 ? DType::f16 : DType::f32;
    all.push_back(random_truncate_fork_scenario(seed, dtype, placement));
  }
  for (const Scenario& scenario : all) {
    std::string why;
    EXPECT_TRUE(passes(scenario, GetParam(), &why)) << scenario.name << ": " << why;
  }
}

TEST(MutantCheck, TruncateKeepsPositionFailsAtTheOldLength) {
  EXPECT_TRUE(passes(truncate_scenario(), "contiguous"));
  const CheckOutcome o = check(truncate_scenario(), "truncate-keeps-position");
  ASSERT_FALSE(o.verdict.pass);
  const Divergence& d = *o.verdict.first;
  EXPECT_EQ(d.kind, FailureKind::wrong_position) << failure_kind_name(d.kind);
  EXPECT_EQ(d.key, (RowKey{0, 1, 2}));  // expected here, after the kept 2 tokens
  EXPECT_NE(d.detail.find("position 5"), std::string::npos) << d.detail;  // the old length
}

TEST(MutantCheck, ForkRestartsPositionsFailsAtTheChildsFirstRow) {
  for (int page_size : {4, 2, 1}) {
    SCOPED_TRACE("page size " + std::to_string(page_size));
    EXPECT_TRUE(passes(fork_scenario(page_size), "paged"));
    const CheckOutcome o = check(fork_scenario(page_size), "fork-restarts-positions");
    ASSERT_FALSE(o.verdict.pass);
    const Divergence& d = *o.verdict.first;
    EXPECT_EQ(d.kind, FailureKind::wrong_position) << failure_kind_name(d.kind);
    EXPECT_EQ(d.key, (RowKey{1, 1, 3}));  // the child's first row, at length(src)
    EXPECT_NE(d.detail.find("position 0"), std::string::npos) << d.detail;
  }
}

TEST(MutantCheck, TruncateAndForkMutantsAreKilledByRandomPrograms) {
  for (const char* name : {"truncate-keeps-position", "fork-restarts-positions"}) {
    int killed = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      if (!passes(random_truncate_fork_scenario(seed, DType::f32, {}), name)) ++killed;
    }
    EXPECT_GE(killed, 10) << name;
  }
}

}  // namespace
}  // namespace kvfuzz
