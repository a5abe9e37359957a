// The paged decode kernel (kernels/cuda/paged_decode.cuh) on the SIMT launcher, against
// attention computed in double here: MHA, GQA and MQA groups (past the 8 q heads one block
// takes), block tables in a shuffled page order, windows, contexts from 1 key to several
// splits, and empty splits where the batch's longest row sets the split count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/paged_decode.cuh"

namespace kvfuzz::cuda {
namespace {

struct Case {
  int q_heads, kv_heads, head_dim, value_dim, page_size, window;
  std::vector<int> lengths;
  int sms = 132;  // H200
};

// Runs the two kernels on `c` with data from `seed`; returns the worst |got - want| over
// every value, relative to the largest |v| (values are small integers over 8).
double worst_error(const Case& c, uint32_t seed, int* splits_used = nullptr) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-8, 8);
  const int batch = static_cast<int>(c.lengths.size());
  int max_pages = 0;
  for (int n : c.lengths) max_pages = std::max(max_pages, (n + c.page_size - 1) / c.page_size);
  const int pages = batch * max_pages;
  std::vector<int> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int> tables(static_cast<size_t>(batch * max_pages));
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = order[i];
  const size_t slots = static_cast<size_t>(pages * c.page_size);
  std::vector<float> k(slots * c.kv_heads * c.head_dim), v(slots * c.kv_heads * c.value_dim);
  std::vector<float> q(static_cast<size_t>(batch * c.q_heads * c.head_dim));
  for (float& x : k) x = static_cast<float>(small(rng)) / 8;
  for (float& x : v) x = static_cast<float>(small(rng)) / 8;
  for (float& x : q) x = static_cast<float>(small(rng)) / 8;
  std::vector<int> batch_seq(static_cast<size_t>(batch));
  std::iota(batch_seq.begin(), batch_seq.end(), 0);
  DecodeArgs a;
  a.kv = {.k = k.data(),
          .v = v.data(),
          .block_tables = tables.data(),
          .max_pages = max_pages,
          .page_size = c.page_size,
          .kv_heads = c.kv_heads,
          .head_dim = c.head_dim,
          .value_dim = c.value_dim};
  a.batch_seq = batch_seq.data();
  a.q = q.data();
  a.lengths = c.lengths.data();
  a.q_heads = c.q_heads;
  a.window = c.window;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  decode_splits(batch, c.kv_heads, *std::max_element(c.lengths.begin(), c.lengths.end()), c.sms,
                a.splits, a.keys_per_split);
  if (splits_used) *splits_used = a.splits;
  const size_t heads = static_cast<size_t>(batch * c.q_heads);
  std::vector<float> partial_out(heads * a.splits * c.value_dim), partial_max(heads * a.splits),
      partial_sum(heads * a.splits), out(heads * c.value_dim);
  a.partial_out = partial_out.data();
  a.partial_max = partial_max.data();
  a.partial_sum = partial_sum.data();
  a.out = out.data();
  KVFUZZ_LAUNCH(paged_decode_split, decode_split_grid(batch, c.q_heads, c.kv_heads, a.splits),
                dim3(kDecodeThreads), 0, a);
  KVFUZZ_LAUNCH(paged_decode_merge, decode_merge_grid(batch, c.q_heads), dim3(kDecodeMergeThreads),
                0, a);
  double worst = 0;
  const int group = c.q_heads / c.kv_heads;
  for (int s = 0; s < batch; ++s) {
    const int n = c.lengths[static_cast<size_t>(s)];
    const int lo = c.window > 0 && n > c.window ? n - c.window : 0;
    for (int h = 0; h < c.q_heads; ++h) {
      const int kv = h / group;
      std::vector<double> score;
      double m = -INFINITY;
      for (int j = lo; j < n; ++j) {
        const size_t slot = static_cast<size_t>(
            tables[static_cast<size_t>(s * max_pages + j / c.page_size)] * c.page_size +
            j % c.page_size);
        double dot = 0;
        for (int d = 0; d < c.head_dim; ++d) {
          dot += static_cast<double>(q[static_cast<size_t>((s * c.q_heads + h) * c.head_dim + d)]) *
                 k[(slot * c.kv_heads + kv) * c.head_dim + d];
        }
        score.push_back(dot * a.scale);
        m = std::max(m, score.back());
      }
      for (int d = 0; d < c.value_dim; ++d) {
        double num = 0, den = 0;
        for (int j = lo; j < n; ++j) {
          const size_t slot = static_cast<size_t>(
              tables[static_cast<size_t>(s * max_pages + j / c.page_size)] * c.page_size +
              j % c.page_size);
          const double w = std::exp(score[static_cast<size_t>(j - lo)] - m);
          num += w * v[(slot * c.kv_heads + kv) * c.value_dim + d];
          den += w;
        }
        const double got = out[static_cast<size_t>((s * c.q_heads + h) * c.value_dim + d)];
        worst = std::max(worst, std::isfinite(got) ? std::fabs(got - num / den) : INFINITY);
      }
    }
  }
  return worst;
}

TEST(PagedDecode, MatchesDoubleAttentionAcrossLayouts) {
  const std::vector<Case> cases = {
      {1, 1, 4, 4, 16, 0, {1}},                 // one key
      {4, 4, 8, 8, 16, 0, {17, 40, 3}},         // MHA, pages of 16
      {8, 2, 16, 8, 4, 0, {100, 7, 64}},        // GQA 4, several splits
      {6, 2, 8, 4, 3, 0, {50, 1}},              // GQA 3, odd page size
      {32, 1, 8, 8, 16, 0, {90, 33}},           // MQA over 32 heads: 4 group blocks
      {4, 2, 8, 8, 8, 10, {60, 9, 11}},         // window 10
      {2, 1, 64, 64, 16, 0, {700}, /*sms=*/1},  // long: splits of 256 keys
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    int splits = 0;
    const double e = worst_error(cases[i], static_cast<uint32_t>(i + 1), &splits);
    EXPECT_LT(e, 1e-5) << "case " << i << " (" << splits << " splits)";
  }
}

// The batch's longest row sets the split count: a short row beside it gets empty splits,
// which the merge must weigh 0.
TEST(PagedDecode, ShortRowsBesideALongOneGetEmptySplits) {
  int splits = 0;
  const double e = worst_error({4, 2, 8, 8, 16, 0, {200, 2, 33}}, 9, &splits);
  EXPECT_GE(splits, 4);
  EXPECT_LT(e, 1e-5);
}

TEST(PagedDecode, SplitsFillTheMachineFromTheBatchAndTheLongestContext) {
  int splits = 0, keys = 0;
  decode_splits(1, 8, 4096, 132, splits, keys);  // 8 blocks of work: as many splits as allowed
  EXPECT_EQ(splits, 16);
  EXPECT_EQ(keys, 256);
  decode_splits(64, 8, 4096, 132, splits, keys);  // 512 blocks already: one split would do,
  EXPECT_EQ(keys, 256);                           // but a split holds at most 256 keys
  EXPECT_EQ(splits, 16);
  decode_splits(64, 8, 100, 132, splits, keys);
  EXPECT_EQ(splits, 1);
  EXPECT_EQ(keys, 128);
  decode_splits(1, 1, 40, 132, splits, keys);  // at least 32 keys a split
  EXPECT_EQ(splits, 2);
  EXPECT_EQ(keys, 32);
}

}  // namespace
}  // namespace kvfuzz::cuda
