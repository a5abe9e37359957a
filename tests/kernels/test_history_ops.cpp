// Reset, truncate and fork directly on the honest engines: every stream afterwards matches
// a fresh engine fed the same logical stream, and the double-precision attention over it.
#include <gtest/gtest.h>

#include <algorithm>

#include "cpu/paged_storage_engine.h"
#include "engine_tests.h"
#include "kvfuzz/prng.h"

namespace kvfuzz::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, HonestEngine, ::testing::ValuesIn(honest_engines()));

// ---------------------------------------------------------------------------------------
// Reset

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

// ---------------------------------------------------------------------------------------
// Truncate and fork

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

}  // namespace
}  // namespace kvfuzz::test
