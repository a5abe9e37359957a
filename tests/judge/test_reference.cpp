// The reference against hand-computed rows, and the program bookkeeping it rests on
// (logical streams, expected slots).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "judge/reference.h"
#include "judge/reference_parts.h"
#include "judge/tolerance.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/prng.h"
#include "run/runner.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

using test::worked_example;
using test::zero_score_tokens;

using Vec = std::vector<double>;

ExplicitToken token(std::vector<Vec> q, std::vector<Vec> k, std::vector<Vec> v) {
  return ExplicitToken{std::move(q), std::move(k), std::move(v)};
}

std::vector<ReferenceRow> rows_of(const Scenario& s, size_t stream = 0) {
  const TokenTable table(s.tokens, s.layout);
  const auto streams = logical_streams(s);
  return reference_rows(s.layout, table, streams.at(stream));
}

// The P cells' inline f16 conversion (reference.cpp) against f32_to_f16: every f16 rounding
// boundary in [0, 1] (each midpoint between neighbours, and the floats beside it), and a
// sweep of floats in [0, 1] a few thousand bit patterns apart; a P outside [0, 1] takes
// f32_to_f16 itself.
TEST(ReferenceParts, PCellsAreF16Bits) {
  using reference_parts::cell_bits;
  int checked = 0;
  const auto same = [&](float x) {
    ++checked;
    ASSERT_EQ(cell_bits(x, DType::f16), f32_to_f16(x)) << "P " << x;
  };
  for (uint16_t h = 0; h < 0x3C00; ++h) {
    const double mid = (static_cast<double>(f16_to_f32(h)) + f16_to_f32(h + 1)) / 2;
    const auto m = static_cast<float>(mid);
    same(f16_to_f32(h));
    same(m);
    same(std::nextafter(m, 0.0f));
    same(std::nextafter(m, 2.0f));
  }
  for (uint32_t bits = 0; bits <= std::bit_cast<uint32_t>(1.0f); bits += 4099) {
    same(std::bit_cast<float>(bits));
  }
  same(1.0f);
  EXPECT_EQ(cell_bits(1.5, DType::f16), f32_to_f16(1.5f));
  EXPECT_EQ(cell_bits(0.3, DType::bf16), f32_to_bf16(0.3f));
  EXPECT_GT(checked, 300000);
}

TEST(Reference, WorkedExample) {
  const auto rows = rows_of(worked_example());
  ASSERT_EQ(rows.size(), 5u);
  const Vec expected = {2, 3, 14.0 / 3, 7.5, 12.4};
  for (size_t p = 0; p < rows.size(); ++p) {
    EXPECT_EQ(rows[p].key, (RowKey{0, 0, static_cast<int64_t>(p)}));
    EXPECT_EQ(rows[p].key_lo, 0);
    EXPECT_EQ(rows[p].key_hi, static_cast<int64_t>(p));
    ASSERT_EQ(rows[p].values.size(), 1u);
    EXPECT_NEAR(rows[p].values[0], expected[p], 1e-12) << "pos " << p;
    ASSERT_EQ(rows[p].bound.size(), 1u);
    EXPECT_GT(rows[p].bound[0], 0);
    EXPECT_LT(rows[p].bound[0], 1e-4);
  }
  // The bound is exactly the rule's value for the row's inputs (M = 16 over keys 0..3; the
  // equal weights put the row at 7.5, |v - 7.5| averages (5.5 + 3.5 + 0.5 + 8.5) / 4 = 4.5).
  EXPECT_DOUBLE_EQ(rows[3].bound[0], tolerance(ToleranceInputs{.visible_keys = 4,
                                                               .head_dim = 1,
                                                               .max_abs_value = 16,
                                                               .max_score_terms = 0,
                                                               .value_deviation = 4.5,
                                                               .position = 3}));
}

TEST(Reference, OneTokenPrefix) {
  Scenario s = worked_example();
  s.program = {Op::append(0, {0}), Op::append(0, {1, 2})};
  const auto rows = rows_of(s);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_DOUBLE_EQ(rows[1].values[0], 3.0);  // (2 + 4) / 2, not 2 (key 0 only)
}

// 4 q heads over 2 kv heads, head_dim 2, scale 1, nonzero scores. At position 1:
//   h0 (kv 0): q = (ln 3, 0), keys (1,0), (0,1): weights 3:1 over values 1, 3 -> 1.5
//   h1 (kv 0): q = (0, ln 2): weights 1:2 -> 7/3
//   h2 (kv 1): q = (ln 4, 0), keys (1,1), (0,0): weights 4:1 over 10, 20 -> 12
//   h3 (kv 1): q = 0: equal weights -> 15
// (q is rounded to f32 in the table; the exact expectations use the rounded logs.)
TEST(Reference, GroupedQueryHeads) {
  const double l3 = static_cast<float>(std::log(3.0));
  const double l2 = static_cast<float>(std::log(2.0));
  const double l4 = static_cast<float>(std::log(4.0));
  Scenario s;
  s.layout.q_heads = 4;
  s.layout.kv_heads = 2;
  s.layout.head_dim = 2;
  s.layout.scale = 1.0;
  const std::vector<Vec> q = {{l3, 0}, {0, l2}, {l4, 0}, {0, 0}};
  s.tokens = std::vector<ExplicitToken>{token(q, {{1, 0}, {1, 1}}, {{1}, {10}}),
                                        token(q, {{0, 1}, {0, 0}}, {{3}, {20}})};
  s.program = {Op::append(0, {0, 1})};
  const auto rows = rows_of(s);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].values, (Vec{1, 1, 10, 10}));
  const double e3 = std::exp(l3), e2 = std::exp(l2), e4 = std::exp(l4);
  EXPECT_NEAR(rows[1].values[0], (e3 * 1 + 3) / (e3 + 1), 1e-12);
  EXPECT_NEAR(rows[1].values[1], (1 + e2 * 3) / (1 + e2), 1e-12);
  EXPECT_NEAR(rows[1].values[2], (e4 * 10 + 20) / (e4 + 1), 1e-12);
  EXPECT_NEAR(rows[1].values[3], 15.0, 1e-12);
  // And the round numbers they are close to.
  EXPECT_NEAR(rows[1].values[0], 1.5, 1e-6);
  EXPECT_NEAR(rows[1].values[1], 7.0 / 3, 1e-6);
  EXPECT_NEAR(rows[1].values[2], 12.0, 1e-6);
  // The bound of a head uses its own kv head's values: M = 3 for h0, 20 for h2.
  EXPECT_LT(rows[1].bound[0], rows[1].bound[2]);
}

// 3 q heads share one kv head. Position 1, keys (1), (0), values 0, 6, scale 1:
// q = ln 2 -> weights 2:1 -> 2; q = 0 -> 3; q = -ln 2 -> weights 1:2 -> 4.
TEST(Reference, MultiQuery) {
  const double l2 = static_cast<float>(std::log(2.0));
  Scenario s;
  s.layout.q_heads = 3;
  s.layout.kv_heads = 1;
  s.layout.scale = 1.0;
  const std::vector<Vec> q = {{l2}, {0}, {-l2}};
  s.tokens = std::vector<ExplicitToken>{token(q, {{1}}, {{0}}), token(q, {{0}}, {{6}})};
  s.program = {Op::append(0, {0, 1})};
  const auto rows = rows_of(s);
  const double e2 = std::exp(l2);
  EXPECT_NEAR(rows[1].values[0], 6 / (e2 + 1), 1e-12);
  EXPECT_NEAR(rows[1].values[1], 3.0, 1e-12);
  EXPECT_NEAR(rows[1].values[2], 6 * e2 / (1 + e2), 1e-12);
  EXPECT_NEAR(rows[1].values[0], 2.0, 1e-6);
  EXPECT_NEAR(rows[1].values[2], 4.0, 1e-6);
}

TEST(Reference, SlidingWindowSeesExactlyWindowKeys) {
  Scenario s = worked_example();
  s.layout.window = 2;
  s.program = {Op::append(0, {0, 1, 2, 3, 4})};
  const auto rows = rows_of(s);
  const Vec v = {2, 4, 8, 16, 32};
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].key_lo, 0);
  EXPECT_DOUBLE_EQ(rows[0].values[0], 2);
  for (size_t p = 1; p < 5; ++p) {
    EXPECT_EQ(rows[p].key_lo, static_cast<int64_t>(p) - 1);
    EXPECT_EQ(rows[p].key_hi, static_cast<int64_t>(p));
    EXPECT_DOUBLE_EQ(rows[p].values[0], (v[p - 1] + v[p]) / 2) << "pos " << p;
  }
  s.layout.window = 1;
  const auto single = rows_of(s);
  for (size_t p = 0; p < 5; ++p) EXPECT_DOUBLE_EQ(single[p].values[0], v[p]);
}

// head_dim 1, key 0 = 1, key 1 = 0, q = ln 3, values 1 and 11 (row at position 1):
// scale 2 -> weights 9:1 -> 2; scale 1 (the default for head_dim 1) -> 3:1 -> 3.5.
TEST(Reference, SoftmaxScale) {
  const double l3 = std::log(3.0);
  Scenario s;
  s.tokens = std::vector<ExplicitToken>{token({{0}}, {{1}}, {{1}}), token({{l3}}, {{0}}, {{11}})};
  s.program = {Op::append(0, {0, 1})};
  EXPECT_NEAR(rows_of(s)[1].values[0], 3.5, 1e-6);
  s.layout.scale = 2.0;
  EXPECT_NEAR(rows_of(s)[1].values[0], 2.0, 1e-6);
  // head_dim 4: the default scale is 1/2, so q = (ln 9, 0, 0, 0) gives weights 3:1 again.
  Scenario wide;
  wide.layout.head_dim = 4;
  wide.tokens =
      std::vector<ExplicitToken>{token({{0, 0, 0, 0}}, {{1, 0, 0, 0}}, {{1}}),
                                 token({{std::log(9.0), 0, 0, 0}}, {{0, 0, 0, 0}}, {{11}})};
  wide.program = {Op::append(0, {0, 1})};
  EXPECT_DOUBLE_EQ(wide.layout.softmax_scale(), 0.5);
  EXPECT_NEAR(rows_of(wide)[1].values[0], 3.5, 1e-6);
}

// head_dim 2: one frequency (theta^0 = 1), so the pair turns by its position in radians.
// q = k = (1, 0) everywhere: the score of key j for the query at p is cos(p - j).
TEST(Reference, RopeTwoDims) {
  Scenario s;
  s.layout.head_dim = 2;
  s.layout.scale = 1.0;
  s.layout.rope_theta = 10000.0;
  s.tokens =
      std::vector<ExplicitToken>{token({{1, 0}}, {{1, 0}}, {{0}}), token({{1, 0}}, {{1, 0}}, {{1}}),
                                 token({{1, 0}}, {{1, 0}}, {{5}})};
  s.program = {Op::append(0, {0, 1, 2})};
  const auto rows = rows_of(s);
  const double e0 = std::exp(1.0), e1 = std::exp(std::cos(1.0)), e2 = std::exp(std::cos(2.0));
  EXPECT_NEAR(rows[1].values[0], e0 / (e1 + e0), 1e-12);
  EXPECT_NEAR(rows[2].values[0], (e2 * 0 + e1 * 1 + e0 * 5) / (e2 + e1 + e0), 1e-12);
}

// head_dim 4, theta 100: frequencies 1 and 100^(-1/2) = 0.1; pairs are (x0, x2), (x1, x3).
// q = k = (1, 1, 0, 0): score of key j at p = scale * (cos(p - j) + cos(0.1 (p - j))).
TEST(Reference, RopeFourDims) {
  Scenario s;
  s.layout.head_dim = 4;
  s.layout.rope_theta = 100.0;
  const Vec unit = {1, 1, 0, 0};
  s.tokens =
      std::vector<ExplicitToken>{token({unit}, {unit}, {{3}}), token({unit}, {unit}, {{-1}})};
  s.program = {Op::append(0, {0, 0, 0, 1})};
  const auto rows = rows_of(s);
  double num = 0, den = 0;
  for (int j = 0; j <= 3; ++j) {
    const double w = std::exp(0.5 * (std::cos(3 - j) + std::cos(0.1 * (3 - j))));
    num += w * (j == 3 ? -1 : 3);
    den += w;
  }
  EXPECT_NEAR(rows[3].values[0], num / den, 1e-12);
}

// Interleaved pairs are half-split pairs on permuted elements: element 2i of a head in one
// is element i in the other, 2i + 1 is i + d/2, and the pair's frequency is the same. So the
// rows of a scenario in interleaved pairs equal those of its half-split twin whose q and k
// have each element moved so (scores are dot products, which the move leaves as they are),
// and not those of the unmoved scenario in half-split pairs.
TEST(Reference, RopeInterleavedIsHalfSplitOnPermutedElements) {
  constexpr int kDim = 8;
  Scenario interleaved;
  interleaved.layout.head_dim = kDim;
  interleaved.layout.rope_theta = 100.0;
  interleaved.layout.rope_style = RopeStyle::interleaved;
  std::vector<ExplicitToken> tokens, moved;
  uint64_t state = 11;
  const auto draw = [&] { return static_cast<double>(splitmix64(state) % 17) / 4 - 2; };
  for (int t = 0; t < 6; ++t) {
    Vec q(kDim), k(kDim), q_moved(kDim), k_moved(kDim);
    for (int d = 0; d < kDim; ++d) {
      q[d] = draw();
      k[d] = draw();
      const int to = d % 2 == 0 ? d / 2 : d / 2 + kDim / 2;
      q_moved[to] = q[d];
      k_moved[to] = k[d];
    }
    const Vec v = {draw()};
    tokens.push_back(token({q}, {k}, {v}));
    moved.push_back(token({q_moved}, {k_moved}, {v}));
  }
  interleaved.tokens = tokens;
  interleaved.program = {Op::append(0, {0, 1, 2, 3}), Op::append(0, {4, 5})};
  Scenario twin = interleaved;
  twin.layout.rope_style = RopeStyle::half_split;
  twin.tokens = moved;
  Scenario unmoved = twin;
  unmoved.tokens = tokens;
  const auto a = rows_of(interleaved), b = rows_of(twin), c = rows_of(unmoved);
  double differ = 0;
  for (size_t p = 0; p < a.size(); ++p) {
    EXPECT_NEAR(a[p].values[0], b[p].values[0], 1e-12) << "pos " << p;
    differ = std::max(differ, std::fabs(a[p].values[0] - c[p].values[0]));
  }
  EXPECT_GT(differ, 0.01);  // the pairs matter: the unmoved twin's rows are others
}

// RoPE on the last rope_dims elements turns them with angles of the part's own width and
// leaves the others: with q's first elements 0 (so k's first elements add nothing to a
// score) the rows equal those of the part alone as a whole head of rope_dims, and not those
// of the same tokens with RoPE over the whole head (other pairs and frequencies).
TEST(Reference, RopeDimsTurnsTheLastElementsWithThePartsFrequencies) {
  constexpr int kDim = 8, kPart = 4;
  Scenario part;
  part.layout.head_dim = kDim;
  part.layout.rope_theta = 100.0;
  part.layout.rope_dims = kPart;
  part.layout.scale = 0.5;
  std::vector<ExplicitToken> tokens, alone;
  uint64_t state = 5;
  const auto draw = [&] { return static_cast<double>(splitmix64(state) % 17) / 4 - 2; };
  for (int t = 0; t < 6; ++t) {
    Vec q(kDim, 0.0), k(kDim), q_part(kPart), k_part(kPart);
    for (int d = 0; d < kDim; ++d) {
      k[d] = draw();
      if (d >= kDim - kPart) {
        q[d] = draw();
        q_part[d - (kDim - kPart)] = q[d];
        k_part[d - (kDim - kPart)] = k[d];
      }
    }
    const Vec v = {draw()};
    tokens.push_back(token({q}, {k}, {v}));
    alone.push_back(token({q_part}, {k_part}, {v}));
  }
  part.tokens = tokens;
  part.program = {Op::append(0, {0, 1, 2, 3}), Op::append(0, {4, 5})};
  part.name = "rope-dims";
  ASSERT_FALSE(validate(part)) << validate(part)->path << ": " << validate(part)->message;
  Scenario whole_part = part;
  whole_part.layout.head_dim = kPart;
  whole_part.layout.rope_dims.reset();
  whole_part.tokens = alone;
  Scenario whole_head = part;
  whole_head.layout.rope_dims.reset();
  const auto a = rows_of(part), b = rows_of(whole_part), c = rows_of(whole_head);
  double differ = 0;
  for (size_t p = 0; p < a.size(); ++p) {
    EXPECT_NEAR(a[p].values[0], b[p].values[0], 1e-12) << "pos " << p;
    differ = std::max(differ, std::fabs(a[p].values[0] - c[p].values[0]));
  }
  EXPECT_GT(differ, 0.01);  // the part matters: RoPE over the whole head gives other rows
  // The shape names the part's pairs after its offset, in both styles.
  const RopeShape half{kDim, kPart, RopeStyle::half_split};
  const RopeShape inter{kDim, kPart, RopeStyle::interleaved};
  EXPECT_EQ(half.pair(1).first, 5u);
  EXPECT_EQ(half.pair(1).second, 7u);
  EXPECT_EQ(inter.pair(1).first, 6u);
  EXPECT_EQ(inter.pair(1).second, 7u);
  EXPECT_EQ(half.pair_of(7), 1u);
  EXPECT_EQ(inter.pair_of(5), 0u);
  EXPECT_FALSE(half.turns(3));
  EXPECT_TRUE(half.turns(4));
}

// RoPE scores depend on relative positions only. With a window of 3, the row at p of
// stream A = [t1..t6] and the row at p + 7 of stream B = [7 other tokens, t1..t6] see the
// same three tokens at the same distances, so they must be equal.
TEST(Reference, RopeRelativePositionInvariance) {
  Scenario s;
  s.layout.q_heads = 2;
  s.layout.kv_heads = 1;
  s.layout.head_dim = 8;
  s.layout.value_dim = 3;
  s.layout.window = 3;
  s.layout.rope_theta = 10000.0;
  s.tokens = GeneratedTokens{.seed = 7, .count = 16, .distribution = Distribution::uniform};
  s.sequences = 2;
  s.program = {Op::append(0, {1, 2, 3, 4, 5, 6}),
               Op::append(1, {9, 10, 11, 12, 13, 14, 15, 1, 2, 3, 4, 5, 6})};
  const auto a = rows_of(s, 0);
  const auto b = rows_of(s, 1);
  bool any_difference_without_window = false;
  for (size_t p = 2; p < a.size(); ++p) {
    for (size_t i = 0; i < a[p].values.size(); ++i) {
      EXPECT_NEAR(a[p].values[i], b[p + 7].values[i], 1e-12) << "pos " << p << " value " << i;
    }
  }
  // Not vacuous: without the window the shifted rows see the prefix and differ.
  s.layout.window.reset();
  const auto c = rows_of(s, 1);
  for (size_t p = 2; p < a.size(); ++p) {
    any_difference_without_window |= std::fabs(a[p].values[0] - c[p + 7].values[0]) > 1e-6;
  }
  EXPECT_TRUE(any_difference_without_window);
}

TEST(Reference, ModelsStorageRounding) {
  Scenario s;
  s.layout.dtype = DType::f16;
  s.tokens = zero_score_tokens({1.0 / 3, 0.1});
  s.program = {Op::append(0, {0, 1})};
  const auto rows = rows_of(s);
  const double third = round_to_dtype(static_cast<float>(1.0 / 3), DType::f16);
  const double tenth = round_to_dtype(0.1f, DType::f16);
  EXPECT_NE(third, static_cast<double>(static_cast<float>(1.0 / 3)));
  EXPECT_EQ(rows[0].values[0], third);
  EXPECT_DOUBLE_EQ(rows[1].values[0], (third + tenth) / 2);
  s.layout.dtype = DType::bf16;
  EXPECT_EQ(rows_of(s)[0].values[0], round_to_dtype(static_cast<float>(1.0 / 3), DType::bf16));
}

// P rounded to a dtype (tolerance.cpp, step 8): the weights of the keys whose P is not 1 are
// pooled by the cell their P rounds into. 80 distinct scores, each on two keys: every pair
// shares a cell, and no two pairs do (adjacent P differ by 2%, cells by 0.8% at most), so
// the spread is sqrt(sum over pairs of (2 w)^2), sqrt(2) times what keys counted one by
// one would give. With 80 cells the probabilistic term (spread) is the smaller, so the
// pooling decides the bound. Computed again, after rows of other numerics on the same
// thread, the parts are the same bits (the per-thread table of cells is left empty).
TEST(Reference, PRoundingPoolsTheWeightsOfEachCell) {
  Scenario s;
  constexpr int kPairs = 80;
  std::vector<ExplicitToken> tokens;
  std::vector<int> ids;
  for (int j = 0; j < 2 * kPairs; ++j) {
    const auto k = static_cast<float>(-0.02 * (j / 2));
    tokens.push_back(token({{1}}, {{k}}, {{1}}));
    ids.push_back(j);
  }
  s.tokens = tokens;
  s.program = {Op::append(0, ids)};
  double total = 0, squares = 0, mass = 0;
  for (int pair = 0; pair < kPairs; ++pair) {
    const double p = std::exp(static_cast<double>(static_cast<float>(-0.02 * pair)));
    total += 2 * p;
  }
  for (int pair = 1; pair < kPairs; ++pair) {  // pair 0 scores the maximum: P = 1, exact
    const double cell = 2 * std::exp(static_cast<double>(static_cast<float>(-0.02 * pair))) / total;
    squares += cell * cell;
    mass += cell;
  }
  const TokenTable table(s.tokens, s.layout);
  const LogicalStream stream = logical_streams(s).at(0);
  for (const DType p : {DType::bf16, DType::f16}) {
    EngineNumerics numerics;
    numerics.p = p;
    const ReferenceRow last = reference_rows(s.layout, table, stream, numerics).back();
    const double expected = tolerance_parts(ToleranceInputs{.numerics = numerics,
                                                            .visible_keys = 2 * kPairs,
                                                            .max_abs_value = 1,
                                                            .p_weight_spread = std::sqrt(squares),
                                                            .p_weight_mass = mass})
                                .p_rounding;
    const double one_by_one =
        tolerance_parts(ToleranceInputs{.numerics = numerics,
                                        .visible_keys = 2 * kPairs,
                                        .max_abs_value = 1,
                                        .p_weight_spread = std::sqrt(squares / 2),
                                        .p_weight_mass = mass})
            .p_rounding;
    ASSERT_LT(one_by_one, expected * 0.75) << dtype_name(p);  // the test can tell them apart
    EXPECT_NEAR(last.bound_parts[0].p_rounding, expected, 1e-12 * expected) << dtype_name(p);
    EXPECT_NEAR(
        reference_rows_plain(s.layout, table, stream, numerics).back().bound_parts[0].p_rounding,
        expected, 1e-12 * expected)
        << dtype_name(p);
    EngineNumerics other;
    other.p = p == DType::bf16 ? DType::f16 : DType::bf16;
    (void)reference_rows(s.layout, table, stream, other);
    EXPECT_EQ(reference_rows(s.layout, table, stream, numerics).back().bound_parts[0].p_rounding,
              last.bound_parts[0].p_rounding)
        << dtype_name(p);
  }
}

// Two sequences, steps, resets (one of them leaving an empty epoch).
Scenario reset_program() {
  Scenario s;
  s.sequences = 2;
  s.tokens = zero_score_tokens({1, 2, 3, 4, 5, 6, 7});
  s.program = {Op::append(0, {0, 1}), Op::step({Chunk{1, {2}}, Chunk{0, {3}}}),
               Op::reset(0),          Op::reset(0),
               Op::append(1, {4}),    Op::step({Chunk{0, {5, 6}}})};
  return s;
}

TEST(Program, LogicalStreams) {
  const auto streams = logical_streams(reset_program());
  ASSERT_EQ(streams.size(), 3u);
  EXPECT_EQ(streams[0].seq, 0);
  EXPECT_EQ(streams[0].epoch, 0);
  EXPECT_EQ(streams[0].tokens, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(streams[1].seq, 1);
  EXPECT_EQ(streams[1].epoch, 0);
  EXPECT_EQ(streams[1].tokens, (std::vector<int>{2, 4}));
  EXPECT_EQ(streams[2].seq, 0);
  EXPECT_EQ(streams[2].epoch, 2);  // epoch 1 was empty and is left out
  EXPECT_EQ(streams[2].tokens, (std::vector<int>{5, 6}));
}

TEST(Program, ExpectedSlots) {
  const auto slots = expected_slots(reset_program());
  struct Want {
    int seq, epoch;
    int64_t pos;
    int op, chunk, token;
  };
  const std::vector<Want> want = {{0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 1}, {1, 0, 0, 1, 0, 0},
                                  {0, 0, 2, 1, 1, 0}, {1, 0, 1, 4, 0, 0}, {0, 2, 0, 5, 0, 0},
                                  {0, 2, 1, 5, 0, 1}};
  ASSERT_EQ(slots.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(slots[i].key, (RowKey{want[i].seq, want[i].epoch, want[i].pos}));
    EXPECT_EQ(slots[i].origin.op, want[i].op);
    EXPECT_EQ(slots[i].origin.chunk, want[i].chunk);
    EXPECT_EQ(slots[i].origin.token, want[i].token);
  }
}

TEST(Program, PreparedReferenceCoversEverySlot) {
  const Scenario s = reset_program();
  const Prepared prepared = prepare(s);
  EXPECT_EQ(prepared.reference.size(), prepared.slots.size());
  for (const ExpectedSlot& slot : prepared.slots) {
    EXPECT_TRUE(prepared.reference.contains(slot.key)) << to_string(slot.key);
  }
  // seq 0 epoch 2 starts over: its first row sees only token 5 (value 6).
  EXPECT_DOUBLE_EQ(prepared.reference.at(RowKey{0, 2, 0}).values[0], 6.0);
  EXPECT_DOUBLE_EQ(prepared.reference.at(RowKey{0, 0, 2}).values[0], (1 + 2 + 4) / 3.0);
}

TEST(Program, ReferenceIgnoresChunkSchedule) {
  Scenario a;
  a.layout.q_heads = 4;
  a.layout.kv_heads = 2;
  a.layout.head_dim = 4;
  a.layout.value_dim = 2;
  a.layout.rope_theta = 500.0;
  a.tokens = GeneratedTokens{.seed = 3, .count = 8, .distribution = Distribution::dyadic};
  a.program = {Op::append(0, {0, 1, 2, 3, 4, 5})};
  Scenario b = a;
  b.program = {Op::append(0, {0, 1}), Op::step({Chunk{0, {2}}}), Op::append(0, {3, 4, 5})};
  const Prepared pa = prepare(a), pb = prepare(b);
  ASSERT_EQ(pa.reference.size(), 6u);
  ASSERT_EQ(pb.reference.size(), 6u);
  for (const auto& [key, row] : pa.reference) {
    const ReferenceRow& other = pb.reference.at(key);
    EXPECT_EQ(row.values, other.values) << to_string(key);
    EXPECT_EQ(row.bound, other.bound) << to_string(key);
    EXPECT_EQ(row.key_lo, other.key_lo);
    EXPECT_EQ(row.key_hi, other.key_hi);
  }
}

// Values 2, 4, 8, 16, 32 with zero scores. Sequence 0 takes 0..2; fork gives sequence 1 the
// same three tokens (a new epoch of 1 that continues at position 3); truncate keeps token 0
// of sequence 0 (a new epoch of 0 that continues at 1); then each grows by one token.
TEST(Program, TruncateAndForkStartEpochsThatInheritAPrefix) {
  Scenario s;
  s.sequences = 2;
  s.tokens = zero_score_tokens({2, 4, 8, 16, 32});
  s.program = {Op::append(0, {0, 1, 2}), Op::fork(0, 1), Op::truncate(0, 1), Op::append(0, {3}),
               Op::append(1, {4})};
  const auto streams = logical_streams(s);
  ASSERT_EQ(streams.size(), 3u);
  EXPECT_EQ(streams[1].seq, 0);
  EXPECT_EQ(streams[1].epoch, 1);
  EXPECT_EQ(streams[1].tokens, (std::vector<int>{0, 3}));
  EXPECT_EQ(streams[1].first_row, 1);
  EXPECT_EQ(streams[2].seq, 1);
  EXPECT_EQ(streams[2].epoch, 1);
  EXPECT_EQ(streams[2].tokens, (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(streams[2].first_row, 3);

  const auto slots = expected_slots(s);
  ASSERT_EQ(slots.size(), 5u);
  EXPECT_EQ(slots[3].key, (RowKey{0, 1, 1}));
  EXPECT_EQ(slots[4].key, (RowKey{1, 1, 3}));

  const Prepared p = prepare(s);
  ASSERT_EQ(p.reference.size(), 5u);  // inherited positions have no rows of their own
  EXPECT_DOUBLE_EQ(p.reference.at({0, 1, 1}).values[0], (2.0 + 16) / 2);
  EXPECT_DOUBLE_EQ(p.reference.at({1, 1, 3}).values[0], (2.0 + 4 + 8 + 32) / 4);
  EXPECT_EQ(p.reference.at({1, 1, 3}).key_lo, 0);
  EXPECT_EQ(p.reference.at({1, 1, 3}).key_hi, 3);
  s.name = "truncate-and-fork";
  const auto problem = validate(s);
  EXPECT_FALSE(problem.has_value()) << problem->path << ": " << problem->message;
}

TEST(Program, ToStringOfKey) {
  EXPECT_EQ(to_string(RowKey{0, 1, 4}), "seq 0 epoch 1 pos 4");
}

TEST(Expect, HandRowsAgainstReference) {
  Scenario s = worked_example();
  s.expect = {ExpectedRow{0, 0, 3, {{7.5}}}, ExpectedRow{0, 0, 4, {{12.4}}}};
  const Prepared prepared = prepare(s);
  EXPECT_EQ(judge_expect(s, prepared), std::nullopt);

  s.expect.push_back(ExpectedRow{0, 0, 2, {{4.6}}});
  const auto message = judge_expect(s, prepared);
  ASSERT_TRUE(message.has_value());
  for (const char* part :
       {"expect[2]", "seq 0 epoch 0 pos 2", "q head 0", "dim 0", "4.6", "4.66666"}) {
    EXPECT_NE(message->find(part), std::string::npos) << part << " in: " << *message;
  }

  s.expect = {ExpectedRow{0, 0, 9, {{1}}}};
  ASSERT_TRUE(judge_expect(s, prepared).has_value());
  EXPECT_NE(judge_expect(s, prepared)->find("pos 9"), std::string::npos);
  s.expect = {ExpectedRow{0, 0, 1, {{3, 3}}}};
  ASSERT_TRUE(judge_expect(s, prepared).has_value());
  // 1e-9 relative passes, absolute below magnitude 1.
  s.expect = {ExpectedRow{0, 0, 4, {{12.4 * (1 + 5e-10)}}}};
  EXPECT_EQ(judge_expect(s, prepared), std::nullopt);
  s.expect = {ExpectedRow{0, 0, 4, {{12.4 * (1 + 5e-9)}}}};
  EXPECT_TRUE(judge_expect(s, prepared).has_value());
}

TEST(Tolerance, Shape) {
  const ToleranceInputs base{
      .visible_keys = 8, .head_dim = 4, .max_abs_value = 1, .max_score_terms = 1};
  EXPECT_GT(tolerance(base), 0);
  auto with = [&](auto change) {
    ToleranceInputs in = base;
    change(in);
    return tolerance(in);
  };
  EXPECT_EQ(with([](ToleranceInputs& in) { in.max_abs_value = 0; }), 0);
  EXPECT_DOUBLE_EQ(with([](ToleranceInputs& in) { in.max_abs_value = 10; }), 10 * tolerance(base));
  EXPECT_GT(with([](ToleranceInputs& in) { in.visible_keys = 1000; }), tolerance(base));
  EXPECT_GT(with([](ToleranceInputs& in) { in.max_score_terms = 100; }), tolerance(base));
  EXPECT_GT(with([](ToleranceInputs& in) { in.rope = true; }), tolerance(base));
  const double rope_near = with([](ToleranceInputs& in) { in.rope = true; });
  const double rope_far = with([](ToleranceInputs& in) {
    in.rope = true;
    in.position = 100000;
  });
  EXPECT_GT(rope_far, rope_near);
  const double bf16 = with([](ToleranceInputs& in) {
    in.rope = true;
    in.dtype = DType::bf16;
  });
  EXPECT_GT(bf16, rope_near);
  // Never more than what two convex combinations of [-M, M] plus summation can differ by.
  const double huge = with([](ToleranceInputs& in) { in.max_score_terms = 1e30; });
  EXPECT_LT(huge, 2 * (2 + 1e-3));
  EXPECT_TRUE(std::isfinite(with([](ToleranceInputs& in) { in.max_score_terms = HUGE_VAL; })));
  // Small f32 rows are tight: around 1e-6 relative.
  EXPECT_LT(tolerance(base), 1e-5);
}

}  // namespace
}  // namespace kvfuzz

namespace kvfuzz {
namespace {

// The parts explain prints add up to the bound, and each declared numerics adds its own.
TEST(Tolerance, PartsAddUpAndDeclaredNumericsAddTheirTerms) {
  ToleranceInputs in{.visible_keys = 16,
                     .head_dim = 8,
                     .max_abs_value = 4,
                     .max_score_terms = 2,
                     .value_deviation = 1,
                     .value_magnitude = 2,
                     .p_weight_spread = 0.3,
                     .p_weight_mass = 0.9};
  const auto total = [](const BoundParts& p) { return p.softmax + p.sums + p.p_rounding; };
  EXPECT_DOUBLE_EQ(total(tolerance_parts(in)), tolerance(in));
  EXPECT_EQ(tolerance_parts(in).p_rounding, 0);  // P not rounded: the weights play no part
  in.numerics.p = DType::bf16;
  // The smaller of the worst case 2 u_p M mass and 2 lambda u_p M spread: 2 * 2^-8 * 4 * 0.9.
  EXPECT_DOUBLE_EQ(tolerance_parts(in).p_rounding, 2 * 0x1p-8 * 4 * 0.9);
  EXPECT_DOUBLE_EQ(total(tolerance_parts(in)), tolerance(in));
  const double f32_sums = tolerance_parts(in).sums;
  in.numerics.value_accumulation = DType::f16;
  EXPECT_DOUBLE_EQ(tolerance_parts(in).sums, 8 * std::sqrt(48.0) * 0x1p-11 * 2 + 4 * 0x1p-11 * 4);
  EXPECT_GT(tolerance_parts(in).sums, 100 * f32_sums);
}

// A row rounded to bf16 is accepted up to the bound plus half a bf16 ulp at the largest
// magnitude the unrounded value may have; f32 rows only up to the bound.
TEST(Tolerance, AcceptedErrorAddsHalfTheOutputSpacing) {
  EXPECT_EQ(accepted_error(0.25, 1.5, DType::f32), 0.25);
  EXPECT_EQ(accepted_error(0, 1.5, DType::bf16), 0x1p-8);            // spacing 2^-7 in [1, 2)
  EXPECT_EQ(accepted_error(0.75, 1.5, DType::bf16), 0.75 + 0x1p-7);  // |x| up to 2.25
  EXPECT_EQ(accepted_error(0, 1.5, DType::f16), 0x1p-11);
  EXPECT_EQ(accepted_error(0, 0, DType::f16), 0x1p-25);  // the subnormal spacing's half
}

}  // namespace
}  // namespace kvfuzz

namespace kvfuzz {
namespace {

// Declared exact RoPE angles drop the angle term, which otherwise grows with the position
// and leaves long-context rows unjudged (bound >= M): here 40 p u S at p = 8000, S = 8.
// Step 13: the soft cap's per-key softmax term replaces the row-wide one only where it is
// smaller; a sink counts as a key (a row with one key and a sink is no longer exact), and
// the features' logit terms grow the bound.
TEST(Tolerance, FeaturesAddTheirTermsAndTheCapsKeyByKeyTermOnlyTightens) {
  ToleranceInputs in{.visible_keys = 8,
                     .head_dim = 16,
                     .max_abs_value = 4,
                     .max_score_terms = 3000,
                     .value_deviation = 2};
  const BoundParts plain = tolerance_parts(in);
  in.softcap = 50;
  in.min_abs_score = 0;
  const BoundParts capped = tolerance_parts(in);
  EXPECT_GE(capped.softmax, plain.softmax);  // a key at score 0: the cap's slope is 1
  in.keywise_softmax = 1e-6;
  EXPECT_DOUBLE_EQ(tolerance_parts(in).softmax, 2 * (1e-6 + 8 * 0x1p-1021 * 4));
  in.keywise_softmax = 1e9;  // never looser than the row-wide term
  EXPECT_DOUBLE_EQ(tolerance_parts(in).softmax, capped.softmax);
  const KeyErrors errors = key_errors(in);
  EXPECT_GT(errors.reach, 0);
  EXPECT_GT(errors.rest, 7 * 0x1p-24 * 50);
  // A key's own ambiguity joins its own logit error only; the shared reach leaves it out.
  in.rotated_key_ambiguity = 0.5;
  const KeyErrors shared = key_errors(in, 0.5);
  EXPECT_NEAR(shared.reach, errors.reach, 1e-9);
  EXPECT_GT(shared.of(0, 0.5), shared.of(0, 0) + 0.49);
  EXPECT_LT(shared.of(1e6, 0.5), shared.of(0, 0.5));  // a saturated key: the cap's slope

  ToleranceInputs one{.visible_keys = 1, .head_dim = 4, .max_abs_value = 1, .max_score_terms = 1};
  EXPECT_EQ(tolerance_parts(one).softmax, 0);
  one.sink = 2.0;
  EXPECT_GT(tolerance_parts(one).softmax, 0);
  ToleranceInputs biased = one;
  biased.alibi_reach = 1000;
  EXPECT_GT(tolerance_parts(biased).logit_error, tolerance_parts(one).logit_error);
}

TEST(Tolerance, ExactRopeAnglesDropTheAngleTerm) {
  ToleranceInputs in{.visible_keys = 8000,
                     .head_dim = 16,
                     .max_abs_value = 1,
                     .max_score_terms = 8,
                     .value_deviation = 0.5,
                     .rope = true,
                     .position = 8000};
  const double f32_angles = tolerance_parts(in).logit_error;
  in.numerics.rope_angles_exact = true;
  const double exact = tolerance_parts(in).logit_error;
  EXPECT_NEAR(f32_angles - exact, 40 * 8000 * 0x1p-24 * 8, 1e-12);
  EXPECT_LT(tolerance(in), 0.05);  // judged: far below M = 1
}

}  // namespace
}  // namespace kvfuzz
