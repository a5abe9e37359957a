// PagedKvStore directly: poison everywhere at the start and after a release, the order
// pages are reused in, the pool's size limit, and the reference counts and copy-on-write
// behind truncate and fork.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/kv_array.h"
#include "cpu/page_pool.h"
#include "engine_tests.h"
#include "kvfuzz/limits.h"

namespace kvfuzz::test {
namespace {

// ---------------------------------------------------------------------------------------
// Poison, release and reuse order

// Physical page of slot `pos` of `seq`, recovered from the store's K offsets.
int page_of(const cpu::PagedKvStore& store, const Layout& layout, int seq, int64_t pos) {
  const size_t slot = store.k_offset(seq, pos, 0) / static_cast<size_t>(layout.kv_heads) /
                      static_cast<size_t>(layout.head_dim);
  return static_cast<int>(slot / static_cast<size_t>(layout.page_size));
}

// A part of a quantized row (MLA's value: the first value_dim elements of its key's row)
// reads back what the whole row reads there, in fp8, a ggml block and an affine group, and
// across rows too (without this the CPU engines read nothing of a part: an MLA value over an
// fp8 key cache came back as garbage).
TEST(KvArray, PartOfAQuantizedRowReadsWhatTheWholeRowDoes) {
  for (const KvFormat& format :
       {KvFormat{KvQuant::fp8_e4m3fn, {0.5, 2.0}, 0}, KvFormat{KvQuant::q4_0, {}, 0},
        KvFormat{KvQuant::affine4, {}, 32}}) {
    SCOPED_TRACE(std::string(kv_quant_name(format.quant)));
    cpu::KvArray array(DType::f32, format, 32, 2);
    std::vector<float> rows(3 * 2 * 32);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i) * 0.37f - 20.0f;
    array.append(rows.data(), rows.size());
    std::vector<float> whole(rows.size());
    array.read(0, whole.data(), whole.size());
    for (const auto& [at, n] :
         std::vector<std::pair<size_t, size_t>>{{0, 7}, {32, 5}, {70, 40}, {5, 1}, {64, 32}}) {
      std::vector<float> part(n);
      array.read(at, part.data(), n);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(part[i], whole[at + i]) << at << " + " << i;
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

// ---------------------------------------------------------------------------------------
// Reference counts, copy-on-write, poison, accounting

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

}  // namespace
}  // namespace kvfuzz::test
