// What the engine tests share: token data as the engines see it (token-major q/k/v), engines
// made from the registry, feeding helpers, a double-precision attention written from the
// formula, row comparisons, logical streams for truncate and fork, and the page pool's
// invariants.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/page_pool.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"
#include "test_scenarios.h"

namespace kvfuzz::test {

// ---------------------------------------------------------------------------------------
// Token data, engines, feeding

// Token-major q/k/v of a token stream, already rounded to the layout's dtype.
struct Data {
  Layout layout;
  int count = 0;
  std::vector<float> q, k, v;
  size_t qs() const { return static_cast<size_t>(layout.q_heads * layout.head_dim); }
  size_t ks() const { return static_cast<size_t>(layout.kv_heads * layout.head_dim); }
  size_t vs() const { return static_cast<size_t>(layout.kv_heads * layout.value_dim); }
};

inline Data generated(const Layout& layout, int count, uint64_t seed,
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
inline Data worked(int count = 5) {
  const Layout layout = make_layout({.page_size = 4});
  Data d{layout, count, {}, {}, {}};
  for (int t = 0; t < count; ++t) {
    d.q.push_back(0);
    d.k.push_back(0);
    d.v.push_back(std::ldexp(1.0f, t + 1));
  }
  return d;
}

// Two q heads over one kv head, head_dim 8, value_dim 4, pages of 16, RoPE: the layout of
// the long-context tests.
inline Layout long_context_layout() {
  return make_layout({.q_heads = 2,
                      .kv_heads = 1,
                      .head_dim = 8,
                      .value_dim = 4,
                      .page_size = 16,
                      .rope_theta = 10000.0});
}

inline std::vector<int> identity_order(int pages) {
  std::vector<int> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

inline EngineConfig config_for(const Layout& layout, int sequences = 1, int pages = 64,
                               std::vector<int> order = {}, Poison poison = Poison::nan) {
  EngineConfig c;
  c.layout = layout;
  c.sequences = sequences;
  c.page_order = order.empty() ? identity_order(pages) : std::move(order);
  c.poison = poison;
  return c;
}

inline std::unique_ptr<Engine> make_engine(const std::string& name, const EngineConfig& config) {
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

inline ChunkIn chunk_of(const Data& d, Feed f) {
  const auto at = [&](const std::vector<float>& data, size_t stride) {
    return std::span<const float>(data).subspan(static_cast<size_t>(f.first) * stride,
                                                static_cast<size_t>(f.count) * stride);
  };
  return ChunkIn{f.seq, f.count, at(d.q, d.qs()), at(d.k, d.ks()), at(d.v, d.vs())};
}

inline std::vector<ChunkOut> step(Engine& engine, const Data& d, const std::vector<Feed>& feeds) {
  std::vector<ChunkIn> chunks;
  for (const Feed& f : feeds) chunks.push_back(chunk_of(d, f));
  std::vector<ChunkOut> outs(chunks.size());
  engine.step(chunks, outs);
  return outs;
}

inline ChunkOut feed(Engine& engine, const Data& d, int seq, int first, int count) {
  return step(engine, d, {Feed{seq, first, count}})[0];
}

// Feeds tokens [0, n) of d to sequence 0 in chunks of the given sizes; returns all rows
// (concatenated out) and positions.
inline ChunkOut feed_schedule(Engine& engine, const Data& d, const std::vector<int>& sizes,
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

// ---------------------------------------------------------------------------------------
// The double-precision attention and row comparisons

// Full-prefix attention in double over tokens [first, first + n) of d as one stream:
// rows[p][h * value_dim + e]. The same formula the engines implement (RoPE half-split at
// the absolute position, window, GQA mapping h / group), written the obvious way.
inline std::vector<std::vector<double>> attention(const Data& d, int first, int n) {
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
inline void expect_rows_near(const ChunkOut& got, const std::vector<std::vector<double>>& want,
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
inline void expect_identical(const ChunkOut& a, const ChunkOut& b) {
  ASSERT_EQ(a.positions, b.positions);
  ASSERT_EQ(a.out.size(), b.out.size());
  for (size_t i = 0; i < a.out.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a.out[i]), std::bit_cast<uint32_t>(b.out[i]))
        << "value " << i << ": " << a.out[i] << " vs " << b.out[i];
  }
}

// ---------------------------------------------------------------------------------------
// Every honest engine

// The honest built-in engines, in registry order: the parameters of HonestEngine.
inline std::vector<std::string> honest_engines() {
  return {"contiguous", "paged", "flash"};
}

// A test run once per honest engine: GetParam() names it, make() builds one.
class HonestEngine : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> make(const Layout& layout, int sequences = 1, int pages = 64,
                               std::vector<int> order = {}, Poison poison = Poison::nan) {
    return make_engine(GetParam(), config_for(layout, sequences, pages, std::move(order), poison));
  }
};

// ---------------------------------------------------------------------------------------
// Logical streams: what truncate and fork leave a sequence holding

// Token ids first, first + 1, ..., first + count - 1.
inline std::vector<int> ids(int first, int count) {
  std::vector<int> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

// The tokens `stream` (ids into d) as one token-major stream.
inline Data gather(const Data& d, const std::vector<int>& stream) {
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

inline std::vector<int> joined(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline void add_rows(ChunkOut& all, const ChunkOut& o) {
  all.out.insert(all.out.end(), o.out.begin(), o.out.end());
  all.positions.insert(all.positions.end(), o.positions.begin(), o.positions.end());
}

// The rows a fresh engine gives for `stream` (ids into d): the first `prefix` tokens as one
// chunk (rows dropped), then chunks of `sizes` (rows kept).
inline ChunkOut fresh_rows(const std::string& name, const Layout& layout, const Data& d,
                           const std::vector<int>& stream, int prefix,
                           const std::vector<int>& sizes) {
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
inline void expect_stream_rows(const ChunkOut& got, const Data& d, const std::vector<int>& stream) {
  const Data g = gather(d, stream);
  const auto n = static_cast<int64_t>(stream.size());
  expect_rows_near(got, attention(g, 0, static_cast<int>(n)),
                   n - static_cast<int64_t>(got.positions.size()), 1e-5, g);
}

// GQA, RoPE (a wrong position changes every value), pages of 4.
inline Layout fork_layout() {
  return make_layout({.q_heads = 4,
                      .kv_heads = 2,
                      .head_dim = 4,
                      .value_dim = 3,
                      .page_size = 4,
                      .rope_theta = 10000.0});
}

// ---------------------------------------------------------------------------------------
// PagedKvStore: the pool's invariants

// Every element of [at, at + n) of `array` decodes to the poison: NaN for nan, else exactly
// +Inf, -Inf or the dtype's largest finite value.
inline void expect_poison(const cpu::KvArray& array, size_t at, size_t n, Poison poison,
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

// The invariants of the pool: each page's count is the number of block tables holding it;
// the free pages are exactly those with count 0; no table holds a page twice; every slot
// outside every sequence's valid prefix (free pages included) holds the poison.
inline void expect_store_invariants(const cpu::PagedKvStore& store, const Layout& layout,
                                    int sequences, Poison poison) {
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

}  // namespace kvfuzz::test
