// The blocked reference (reference_blocked.cpp) against the plain one (reference.cpp) on
// generated scenarios, under several declared numerics: the same keys and visible ranges,
// values within 1e-12 of the row's value scale (M), bounds and each of their parts within 1e-12
// of max(bound, M) (why not of the bound alone: below). And the kernel's two builds (AVX-512, C++
// lanes) give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "judge/reference.h"
#include "judge/reference_kernel.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/prng.h"

namespace kvfuzz {
namespace {

constexpr double kClose = 1e-12;

std::vector<EngineNumerics> numerics_sets() {
  std::vector<EngineNumerics> sets(6);
  sets[1].p = DType::f16;
  sets[2].p = DType::bf16;
  sets[2].value_accumulation = DType::f16;
  sets[3].rotated_keys_in_storage = true;
  sets[4].rotated_keys_in_storage = true;
  sets[4].rotated_queries_in_storage = true;
  sets[4].rope_angles_exact = true;
  sets[5].score_accumulation = DType::f16;
  sets[5].output = DType::bf16;
  return sets;
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  GeneratorOptions options;  // default sizes: head_dim up to 128, GQA groups, windows, RoPE
  for (uint64_t s = 0; s < 120; ++s) {
    PrngChoiceSource choices(7700 + s);
    out.push_back(generate_scenario(choices, options));
  }
  return out;
}

// |a - b| <= kClose * scale, with two equal non-finite values equal.
bool close(double a, double b, double scale) {
  if (!std::isfinite(a) || !std::isfinite(b)) return std::isnan(a) ? std::isnan(b) : a == b;
  return std::fabs(a - b) <= kClose * scale;
}

TEST(ReferenceBlocked, AgreesWithThePlainFormTo1e12) {
  const auto sets = numerics_sets();
  size_t rows = 0, values = 0;
  double worst_value = 0, worst_bound = 0;
  for (const Scenario& s : scenarios()) {
    const TokenTable table(s.tokens, s.layout);
    for (const LogicalStream& stream : logical_streams(s)) {
      for (size_t k = 0; k < sets.size(); ++k) {
        const auto plain = reference_rows_plain(s.layout, table, stream, sets[k]);
        const auto blocked = reference_rows(s.layout, table, stream, sets[k]);
        ASSERT_EQ(plain.size(), blocked.size()) << s.name;
        for (size_t r = 0; r < plain.size(); ++r) {
          const ReferenceRow &a = plain[r], &b = blocked[r];
          const std::string where =
              s.name + " numerics " + std::to_string(k) + " " + to_string(a.key);
          ASSERT_EQ(a.key, b.key) << where;
          ASSERT_EQ(a.key_lo, b.key_lo) << where;
          ASSERT_EQ(a.key_hi, b.key_hi) << where;
          ASSERT_EQ(a.values.size(), b.values.size()) << where;
          const size_t heads = a.bound.size();
          const size_t dims = a.values.size() / std::max<size_t>(1, heads);
          for (size_t h = 0; h < heads; ++h) {
            const double scale = std::max(1e-300, a.value_scale[h]);
            ASSERT_TRUE(close(a.value_scale[h], b.value_scale[h], a.value_scale[h])) << where;
            for (size_t d = 0; d < dims; ++d) {
              const double x = a.values[h * dims + d], y = b.values[h * dims + d];
              ASSERT_TRUE(close(x, y, scale))
                  << where << " head " << h << " dim " << d << ": " << x << " vs " << y;
              if (std::isfinite(x)) worst_value = std::max(worst_value, std::fabs(x - y) / scale);
              ++values;
            }
            // The bound and each part within 1e-12 of the bound or of M, whichever is larger (a
            // bound judges values of scale M: 1e-12 M is as far as the values agree). Not
            // relative to the bound alone: it inherits the conditioning of the values'
            // deviation around the row, sum_j w_j |v_j - row|, and where the weights sit on
            // values close to the row, the row's own rounding (a few 1e-15 M in either form,
            // different sums in different orders) is a relative 1e-5 of it and more.
            const double bound = std::max(std::fabs(a.bound[h]), a.value_scale[h]);
            const auto relative = [&](double x, double y, const char* what) {
              ASSERT_TRUE(close(x, y, bound))
                  << where << " head " << h << " " << what << ": " << x << " vs " << y;
              if (bound > 0 && std::isfinite(x)) {
                worst_bound = std::max(worst_bound, std::fabs(x - y) / bound);
              }
            };
            relative(a.bound[h], b.bound[h], "bound");
            relative(a.bound_parts[h].logit_error, b.bound_parts[h].logit_error, "logit error");
            relative(a.bound_parts[h].softmax, b.bound_parts[h].softmax, "softmax");
            relative(a.bound_parts[h].sums, b.bound_parts[h].sums, "sums");
            relative(a.bound_parts[h].p_rounding, b.bound_parts[h].p_rounding, "p rounding");
          }
          ++rows;
        }
      }
    }
  }
  // The margin, for the record: the largest relative differences seen.
  std::printf("%zu rows, %zu values: worst value difference %.3g of M, worst bound %.3g\n", rows,
              values, worst_value, worst_bound);
  EXPECT_GT(rows, 10000u);
}

// A wrong kernel is caught: the same comparison fails when one weight's value is off by
// 1e-9 (the test above would not pass a blocked form that is wrong).
TEST(ReferenceBlocked, TheComparisonSeesASmallError) {
  PrngChoiceSource choices(7700);
  const Scenario s = generate_scenario(choices);
  const TokenTable table(s.tokens, s.layout);
  const LogicalStream stream = logical_streams(s).at(0);
  const auto plain = reference_rows_plain(s.layout, table, stream);
  const auto blocked = reference_rows(s.layout, table, stream);
  ASSERT_FALSE(plain.empty());
  const double scale = plain.back().value_scale[0];
  EXPECT_TRUE(close(plain.back().values[0], blocked.back().values[0], scale));
  EXPECT_FALSE(close(plain.back().values[0], blocked.back().values[0] + 1e-9 * scale, scale));
}

// Holds a vector build of the kernel to the plain lanes, bit for bit, on every scenario.
void expect_same_bits_as_the_lanes(reference_kernel::Kernel kernel) {
  const auto sets = numerics_sets();
  size_t compared = 0;
  for (const Scenario& s : scenarios()) {
    const TokenTable table(s.tokens, s.layout);
    for (const LogicalStream& stream : logical_streams(s)) {
      const EngineNumerics& numerics = sets[compared % sets.size()];
      const auto lanes = reference_kernel::blocked_rows(s.layout, table, stream, numerics,
                                                        reference_kernel::attend_lanes);
      const auto vector = reference_kernel::blocked_rows(s.layout, table, stream, numerics, kernel);
      ASSERT_EQ(lanes.size(), vector.size());
      for (size_t r = 0; r < lanes.size(); ++r) {
        const auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
          return a.size() == b.size() &&
                 std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
        };
        ASSERT_TRUE(same(lanes[r].values, vector[r].values))
            << s.name << " " << to_string(lanes[r].key);
        ASSERT_TRUE(same(lanes[r].bound, vector[r].bound))
            << s.name << " " << to_string(lanes[r].key);
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100u);
}

TEST(ReferenceBlocked, TheAvx512BuildGivesTheSameBitsAsThePlainLanes) {
  if (!reference_kernel::avx512_available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  expect_same_bits_as_the_lanes(reference_kernel::attend_avx512);
}

TEST(ReferenceBlocked, TheAvx2BuildGivesTheSameBitsAsThePlainLanes) {
  if (!reference_kernel::avx2_fma_available()) GTEST_SKIP() << "no AVX2 with FMA on this CPU";
  expect_same_bits_as_the_lanes(reference_kernel::attend_avx2);
}

}  // namespace
}  // namespace kvfuzz

namespace kvfuzz {
namespace {

// The softmax's exp (the model level's reference uses it too): the plain lanes within 2 ulp of
// std::exp where the result is a normal double, 0 below -708, and every vector build this CPU
// has gives the lanes' bits, over whole vectors and tails.
TEST(ReferenceKernelExp, IsWithinTwoUlpsOfStdExpAndTheSameInEveryBuild) {
  std::vector<double> x = {0.0,    -0.0,   -1e-300, -0x1p-30, -0.5,   -1.0,   -0.6931471805599453,
                           -707.9, -708.0, -708.5,  -709.0,   -745.0, -1e300, -HUGE_VAL};
  Xoshiro256 prng(11);
  for (int i = 0; i < 4000; ++i) {
    const double magnitude = i % 2 ? 40.0 : 720.0;
    x.push_back(-magnitude * static_cast<double>(prng.next() >> 11) * 0x1p-53);
  }
  for (size_t n : {x.size(), size_t{37}, size_t{8}, size_t{5}}) {
    std::vector<double> lanes(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    reference_kernel::exp_nonpositive_lanes(lanes.data(), n);
    for (size_t i = 0; i < n; ++i) {
      if (x[i] < -708.0) {
        EXPECT_EQ(lanes[i], 0.0) << x[i];
      } else {
        const double exact = std::exp(x[i]);
        EXPECT_LE(std::fabs(lanes[i] - exact), 2 * (std::nextafter(exact, 2.0) - exact)) << x[i];
      }
    }
    EXPECT_EQ(lanes[0], 1.0);  // exp(0) exactly
    const auto same_as_lanes = [&](reference_kernel::ExpKernel kernel) {
      std::vector<double> y(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
      kernel(y.data(), n);
      EXPECT_EQ(std::memcmp(y.data(), lanes.data(), n * sizeof(double)), 0) << n;
    };
    if (reference_kernel::avx2_fma_available())
      same_as_lanes(reference_kernel::exp_nonpositive_avx2);
    if (reference_kernel::avx512_available())
      same_as_lanes(reference_kernel::exp_nonpositive_avx512);
    same_as_lanes(reference_kernel::exp_nonpositive);
  }
}

}  // namespace
}  // namespace kvfuzz
