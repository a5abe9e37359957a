// The CUDA engines (kernels/cuda/engine) on the SIMT launcher: the device dtype
// conversions bit for bit against the project's, the worked example's rows, every
// property on generated cases over a wide pool (pages past 2^32 elements), each
// kernel-only mutant failing on a case made for its bug, by the margin stated there, the
// same bits under every thread order, and each hazard mutant named by its kind where the
// thread order alone hides it.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cuda/blocks.cuh"
#include "cuda/dtype.cuh"
#include "cuda/engine/cuda_engine.h"
#include "cuda/simt/simt.h"
#include "generated_cases.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/kv_format.h"
#include "kvfuzz/prng.h"
#include "kvfuzz/property.h"
#include "kvfuzz/verdict.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

uint32_t bits_of(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

TEST(CudaDtype, ConversionsMatchTheProjectsBitForBit) {
  // Every 16-bit pattern decoded, and a stride through all 2^32 float patterns encoded
  // (with the edges of f16's and bf16's ranges and every special on the way).
  for (uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    ASSERT_EQ(bits_of(cuda::from_f16_bits(bits)), bits_of(f16_to_f32(bits))) << h;
    ASSERT_EQ(bits_of(cuda::from_bf16_bits(bits)), bits_of(bf16_to_f32(bits))) << h;
  }
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) {
    float x;
    const auto u = static_cast<uint32_t>(b);
    std::memcpy(&x, &u, sizeof x);
    ASSERT_EQ(cuda::to_f16_bits(x), f32_to_f16(x)) << std::hex << u;
    ASSERT_EQ(cuda::to_bf16_bits(x), f32_to_bf16(x)) << std::hex << u;
  }
  for (float x :
       {65504.0f, 65520.0f, 6.1e-5f, 5.96e-8f, 2.98e-8f, -0.0f, INFINITY, -INFINITY, NAN}) {
    EXPECT_EQ(cuda::to_f16_bits(x), f32_to_f16(x)) << x;
    EXPECT_EQ(cuda::to_bf16_bits(x), f32_to_bf16(x)) << x;
  }
}

// The kernels' fp8 (kv_format.h's, which ml_dtypes checks): every code decoded, and a
// stride through the float patterns (with each format's edges) encoded, bit for bit.
TEST(CudaDtype, Fp8ConversionsMatchTheProjectsBitForBit) {
  for (const auto& [type, quant] : {std::pair{cuda::kStorageFp8E4m3, KvQuant::fp8_e4m3fn},
                                    std::pair{cuda::kStorageFp8E5m2, KvQuant::fp8_e5m2}}) {
    for (uint32_t code = 0; code <= 0xFFu; ++code) {
      const auto bits = static_cast<uint8_t>(code);
      const float got = cuda::from_fp8_bits(bits, type), want = fp8_to_f32(bits, quant);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << code;
      } else {
        ASSERT_EQ(bits_of(got), bits_of(want)) << code;
      }
    }
    for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
      ASSERT_EQ(cuda::to_fp8_bits(x, type), f32_to_fp8(x, quant)) << std::hex << b;
    }
    for (float x :
         {448.0f, 464.0f, 57344.0f, 61440.0f, 0.0078125f, 0.001953125f, 1.52587890625e-05f,
          7.62939453125e-06f, 2.5f, 3.5f, -0.0f, INFINITY, -INFINITY, NAN}) {
      EXPECT_EQ(cuda::to_fp8_bits(x, type), f32_to_fp8(x, quant)) << x;
    }
  }
}

// The kernels' ggml blocks (blocks.cuh) against kv_format.h's: random rows of three
// magnitudes, with ties and zero blocks, stored bit for bit as encode_row stores them and
// read back element by element as decode_row reads them.
TEST(CudaDtype, BlockFormatsMatchTheProjectsBitForBit) {
  const std::pair<int, KvQuant> formats[] = {{cuda::kStorageQ8_0, KvQuant::q8_0},
                                             {cuda::kStorageQ4_0, KvQuant::q4_0},
                                             {cuda::kStorageQ4_1, KvQuant::q4_1},
                                             {cuda::kStorageQ5_0, KvQuant::q5_0},
                                             {cuda::kStorageQ5_1, KvQuant::q5_1}};
  uint64_t state = 12345;
  for (const auto& [type, quant] : formats) {
    const KvFormat format{quant, {}, 0};
    for (int row = 0; row < 300; ++row) {
      std::vector<float> x(64);
      const float magnitude = row % 3 == 0 ? 0.01f : row % 3 == 1 ? 3.0f : 1000.0f;
      for (float& v : x) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        v = magnitude * (static_cast<float>(state >> 40) / 16777216.0f * 2 - 1);
        if (row % 7 == 0) v = std::round(v);  // ties of the quants
      }
      if (row % 11 == 0) std::fill(x.begin(), x.begin() + 32, 0.0f);  // a zero block
      if (row % 13 == 0) x[5] = NAN;  // stored without undefined behaviour, both alike
      if (row % 17 == 0) x[40] = INFINITY;
      std::vector<uint8_t> want(row_bytes(format, 64)), got(want.size());
      encode_row(format, DType::f32, 0, x.data(), 64, want.data());
      for (int b = 0; b < 2; ++b) {
        cuda::store_block(x.data() + 32 * b, got.data() + b * cuda::block_bytes(type), type);
      }
      ASSERT_EQ(got, want) << kv_quant_name(quant) << " row " << row;
      std::vector<float> back(64);
      decode_row(format, 0, want.data(), 64, back.data());
      for (int d = 0; d < 64; ++d) {
        const float got_d = cuda::load_block_element(want.data(), d, type, 0);
        const float want_d = back[static_cast<size_t>(d)];
        if (std::isnan(want_d)) {
          ASSERT_TRUE(std::isnan(got_d)) << kv_quant_name(quant) << " row " << row;
          continue;
        }
        ASSERT_EQ(bits_of(got_d), bits_of(want_d))
            << kv_quant_name(quant) << " row " << row << " element " << d;
      }
    }
  }
}

// The kernels' affine groups (blocks.cuh) against kv_format.h's MLX quantizer: every bit
// width and group size, f32 and bf16 scales, random rows of three magnitudes with ties, one
// sign, all-equal groups, NaN and infinite elements; stored bit for bit as encode_row
// stores them and read back as decode_row reads them.
TEST(CudaDtype, AffineGroupsMatchTheProjectsBitForBit) {
  const std::pair<int, KvQuant> formats[] = {{cuda::kStorageAffine2, KvQuant::affine2},
                                             {cuda::kStorageAffine4, KvQuant::affine4},
                                             {cuda::kStorageAffine8, KvQuant::affine8}};
  uint64_t state = 777;
  int rows = 0;
  for (const auto& [type, quant] : formats) {
    for (const int group : {32, 64, 128}) {
      for (const DType dtype : {DType::f32, DType::bf16}) {
        const KvFormat format{quant, {}, group};
        const int width = 128;
        for (int row = 0; row < 60; ++row, ++rows) {
          std::vector<float> x(width);
          const float magnitude = row % 3 == 0 ? 0.01f : row % 3 == 1 ? 3.0f : 1000.0f;
          for (float& v : x) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            v = magnitude * (static_cast<float>(state >> 40) / 16777216.0f * 2 - 1);
            if (row % 7 == 0) v = std::round(v);
            if (row % 5 == 0) v = std::fabs(v);  // one sign: the edge is the minimum
            v = round_to_dtype(v, dtype);        // what the cache is given
          }
          if (row % 11 == 0) std::fill(x.begin(), x.begin() + group, 1.5f);  // all equal
          if (row % 13 == 0) x[5] = NAN;
          if (row % 17 == 0) x[40] = INFINITY;
          std::vector<uint8_t> want(row_bytes(format, width)), got(want.size());
          encode_row(format, dtype, 0, x.data(), width, want.data());
          const int bytes = cuda::affine_group_bytes(type, group);
          for (int g = 0; g < width / group; ++g) {
            cuda::store_affine_group(x.data() + g * group, got.data() + g * bytes, type, group,
                                     static_cast<int>(dtype));
          }
          const std::string what = std::string(kv_quant_name(quant)) + " group " +
                                   std::to_string(group) + " row " + std::to_string(row);
          ASSERT_EQ(got, want) << what;
          std::vector<float> back(width);
          decode_row(format, 0, want.data(), width, back.data());
          for (int d = 0; d < width; ++d) {
            const float got_d = cuda::load_block_element(want.data(), d, type, group);
            const float want_d = back[static_cast<size_t>(d)];
            if (std::isnan(want_d)) {
              ASSERT_TRUE(std::isnan(got_d)) << what;
              continue;
            }
            ASSERT_EQ(bits_of(got_d), bits_of(want_d)) << what << " element " << d;
          }
        }
      }
    }
  }
  EXPECT_EQ(rows, 3 * 3 * 2 * 60);
}

// An engine of the registry's kind, made here with other options.
EngineInfo cuda_engine(std::string name, cuda::CudaEngineOptions options, bool mutant = false) {
  return {std::move(name), "test engine", mutant,
          [options](const EngineConfig& config) -> std::unique_ptr<Engine> {
            return std::make_unique<cuda::CudaEngine>(config, options);
          }};
}

Scenario case_scenario(int index, const GeneratorOptions& options = {}) {
  uint64_t state = 0xC0DA * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index);
  PrngChoiceSource choices(splitmix64(state));
  return generate_scenario(choices, options);
}

// How many of a test's generated cases the honest engines run: all of them in the default
// build, a fifth under ASan + UBSan (generated_cases.h). The faults' cases stay whole.
int honest_cases(int all) {
  return static_cast<int>(test::generated_cases(static_cast<uint64_t>(all)));
}

TEST(CudaEngine, WorkedExampleRowsAreExactOnBothPaths) {
  // Three tokens (a prefill), then positions 3 and 4 as a chunk (prefill kernel) or as two
  // decodes (decode kernel): 7.5 and 12.4, as full-prefix attention gives.
  for (bool decode : {false, true}) {
    EngineConfig config;
    config.layout = test::make_layout({.page_size = 4});
    config.page_order = {0, 1, 2, 3};
    cuda::CudaEngine engine(config, cuda::cuda_f32_options());
    std::vector<float> zeros(5, 0.0f), values{2, 4, 8, 16, 32};
    std::vector<ChunkOut> out(1);
    engine.step(
        std::vector<ChunkIn>{{0, 3, {zeros.data(), 3}, {zeros.data(), 3}, {values.data(), 3}}},
        out);
    std::vector<float> got;
    std::vector<int64_t> positions;
    for (int t = 3; t < 5; t += decode ? 1 : 2) {
      const int n = decode ? 1 : 2;
      engine.step(std::vector<ChunkIn>{{0,
                                        n,
                                        {zeros.data(), static_cast<size_t>(n)},
                                        {zeros.data(), static_cast<size_t>(n)},
                                        {values.data() + t, static_cast<size_t>(n)}}},
                  out);
      got.insert(got.end(), out[0].out.begin(), out[0].out.end());
      positions.insert(positions.end(), out[0].positions.begin(), out[0].positions.end());
    }
    EXPECT_EQ(positions, (std::vector<int64_t>{3, 4}));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_FLOAT_EQ(got[0], 7.5f) << (decode ? "decode" : "prefill");
    EXPECT_FLOAT_EQ(got[1], 12.4f) << (decode ? "decode" : "prefill");
  }
}

TEST(CudaEngine, WidePoolPutsPagesPast2To32ElementsAndEveryPropertyHolds) {
  cuda::CudaEngineOptions options = cuda::cuda_f32_options();
  options.wide_pool = true;
  const EngineInfo wide = cuda_engine("cuda-paged-wide", options);
  EngineConfig config;
  config.layout = test::make_layout(
      {.q_heads = 2, .kv_heads = 2, .head_dim = 4, .value_dim = 4, .page_size = 4});
  config.page_order = {0, 1};
  const cuda::CudaEngine engine(config, options);
  EXPECT_GE(engine.pool().base_page() * 4 * 2 * 4, int64_t{1} << 32);
  for (int i = 0; i < honest_cases(12); ++i) {
    const Scenario scenario = case_scenario(i);
    for (const PropertyInfo& row : kProperties) {
      const PropertyOutcome outcome = judge_property(row.property, scenario, wide);
      EXPECT_TRUE(outcome.pass) << "case " << i << ": " << outcome.report;
    }
  }
}

// Each kernel-only mutant on the first 20 generated cases, beside the honest cuda-paged on
// the same cases: the honest engine passes every one; the mutant fails at least `fails` of
// them, each failure either `other` (a non-finite row, or the race the launcher's check
// names before any poison is read) or a mismatch at least `margin` times its bound (the
// smallest ratio seen is printed). Measured when written (20 cases each):
//   missing-tile-sync 18 failed, all not-finite (19, all races, since the race check);
//   empty-split-unwritten 8, not-finite;
//   half-warp-reduce 7, smallest error/bound 25.9; split-bound-past-length 17, 23.9;
//   offset-32bit 20, 5.0 (it reads zeros: a row of small values moves least).
struct KernelMutant {
  const char* name;
  int fails;
  double margin;
  FailureKind other = FailureKind::not_finite;
};

void PrintTo(const KernelMutant& m, std::ostream* os) {
  *os << m.name;
}

// A parameter's test name: its engine name with '_' for '-'.
template <class Mutant>
std::string test_name(const testing::TestParamInfo<Mutant>& param) {
  std::string name = param.param.name;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

class KernelMutantFails : public testing::TestWithParam<KernelMutant> {};

TEST_P(KernelMutantFails, WhereTheHonestKernelPassesAndByItsMargin) {
  const KernelMutant& m = GetParam();
  const EngineInfo* honest = find_engine("cuda-paged");
  const EngineInfo* mutant = find_engine(m.name);
  ASSERT_TRUE(honest && mutant && mutant->mutant);
  int failed = 0;
  double smallest = INFINITY;
  for (int i = 0; i < 20; ++i) {
    const Scenario scenario = case_scenario(i);
    const PropertyOutcome good = judge_property(Property::prefix, scenario, *honest);
    ASSERT_TRUE(good.pass) << "case " << i << ": " << good.report;
    const PropertyOutcome bad = judge_property(Property::prefix, scenario, *mutant);
    if (bad.pass) continue;
    ++failed;
    ASSERT_TRUE(bad.first.has_value()) << bad.report;
    const Divergence& d = *bad.first;
    if (d.kind == FailureKind::mismatch) {
      smallest = std::min(smallest, d.error / d.bound);
      EXPECT_GE(d.error, m.margin * d.bound) << "case " << i << ": " << bad.report;
    } else {
      EXPECT_EQ(d.kind, m.other) << "case " << i << ": " << bad.report;
    }
  }
  std::cout << m.name << ": " << failed << " of 20 cases failed; smallest error/bound " << smallest
            << "\n";
  EXPECT_GE(failed, m.fails);
}

INSTANTIATE_TEST_SUITE_P(Cuda, KernelMutantFails,
                         testing::Values(KernelMutant{"cuda-missing-tile-sync", 15, 10,
                                                      FailureKind::race},
                                         KernelMutant{"cuda-empty-split-unwritten", 6, 10},
                                         KernelMutant{"cuda-half-warp-reduce", 5, 10},
                                         KernelMutant{"cuda-split-bound-past-length", 15, 10},
                                         KernelMutant{"cuda-offset-32bit", 18, 4}),
                         test_name<KernelMutant>);

// Every property of `scenario` on both honest CUDA engines (each where it supports it).
void expect_every_property(const Scenario& scenario, int index) {
  for (const char* name : {"cuda-paged", "cuda-paged-bf16"}) {
    const EngineInfo* honest = find_engine(name);
    ASSERT_NE(honest, nullptr);
    if (unsupported_layout(scenario, probe_declarations(*honest).supports)) continue;
    for (const PropertyInfo& row : kProperties) {
      const PropertyOutcome outcome = judge_property(row.property, scenario, *honest);
      EXPECT_TRUE(outcome.pass) << name << " case " << index << ": " << outcome.report;
    }
  }
}

// A kernel fault on f32 cases, counted: the cases with a row, those the prefix property
// rejects, and the least error / bound of a first rejected value.
struct FaultTally {
  int cases = 0, failures = 0;
  double smallest_margin = HUGE_VAL;
  void judge(const Scenario& scenario, int faults, const std::string& name) {
    cuda::CudaEngineOptions faulted = cuda::cuda_f32_options();
    faulted.faults = faults;
    const PropertyOutcome outcome =
        judge_property(Property::prefix, scenario, cuda_engine(name, faulted, true));
    if (outcome.pass && outcome.rows_compared == 0) return;  // no row to read it
    ++cases;
    if (outcome.pass) return;
    ++failures;
    if (outcome.first && outcome.first->bound > 0) {
      smallest_margin = std::min(smallest_margin, outcome.first->error / outcome.first->bound);
    }
  }
  // The fault on the first `wanted` f32 cases (the f32 engine's) of the first 40 that
  // `options` generates.
  void judge_f32_cases(const GeneratorOptions& options, int faults, const std::string& name,
                       int wanted = 6) {
    for (int i = 0; cases < wanted && i < 40; ++i) {
      const Scenario scenario = case_scenario(i, options);
      if (scenario.layout.dtype == DType::f32) judge(scenario, faults, name);
    }
  }
  // Prints the tally under `what`, the cases they are.
  void print(const std::string& what, const std::string& cases_are) const {
    std::cout << what << ": " << failures << " of " << cases << " " << cases_are
              << " fail; smallest error / bound " << smallest_margin << "\n";
  }
  // Every case with a row failed, and there were more than two.
  void expect_every_case_failed() const {
    EXPECT_GT(cases, 2);
    EXPECT_EQ(failures, cases);
  }
};

// The attention features (cuda/logit_features.cuh): generated cases with the soft cap,
// sinks, ALiBi and chunked local attention all forced on, every property on both honest
// engines.
TEST(CudaEngine, AttentionFeaturesHoldEveryProperty) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.features = {.softcap = true, .sinks = true, .alibi = true, .chunked_local = true};
  for (int i = 0; i < honest_cases(16); ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(scenario.layout.softcap && !scenario.layout.sinks.empty() &&
                !scenario.layout.alibi.empty() && scenario.layout.chunked_local)
        << "case " << i;
    expect_every_property(scenario, i);
  }
}

// fp8 K/V caches (e4m3fn, e5m2, per-tensor or per-kv-head scales) on both honest engines,
// every property, 12 generated cases each; a kernel that reads V without its scale
// (kFaultFp8VScaleDropped, the "scale applied to K but not V") fails every case
// with a row whose V scales are all other than 1 (the generator's are powers of two, mostly
// not 1; a case with a scale of 1 on the one head its rows read can pass).
TEST(CudaEngine, Fp8CachesHoldEveryPropertyAndAVScaleDroppedFails) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.kv_formats = {KvQuant::fp8_e4m3fn, KvQuant::fp8_e5m2};
  FaultTally dropped;
  for (int i = 0; i < 12; ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(is_fp8(scenario.layout.k_format.quant)) << "case " << i;
    if (i < honest_cases(12)) expect_every_property(scenario, i);
    const std::vector<double>& v_scales = scenario.layout.v_format.scale;
    const bool scaled =
        is_fp8(scenario.layout.v_format.quant) &&
        std::all_of(v_scales.begin(), v_scales.end(), [](double x) { return x != 1.0; });
    if (scaled && scenario.layout.dtype == DType::f32) {
      dropped.judge(scenario, cuda::kFaultFp8VScaleDropped, "cuda-fp8-v-scale-dropped");
    }
  }
  dropped.print("V scale dropped", "cases whose every V scale is other than 1");
  dropped.expect_every_case_failed();
}

// MLX's affine groups (2, 4 and 8 bits; groups of 32, 64 and 128) on both honest engines,
// every property, 12 generated cases; a kernel that unpacks each byte's quants from its
// high bits (kFaultAffineHighFirst) fails the f32 cases with 2- or 4-bit groups.
TEST(CudaEngine, AffineCachesHoldEveryPropertyAndHighFirstUnpackingFails) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.kv_formats = {KvQuant::affine2, KvQuant::affine4, KvQuant::affine8};
  FaultTally high_first;
  for (int i = 0; i < honest_cases(12); ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(is_affine(scenario.layout.k_format.quant)) << "case " << i;
    expect_every_property(scenario, i);
  }
  options.filters.kv_formats = {KvQuant::affine2, KvQuant::affine4};
  high_first.judge_f32_cases(options, cuda::kFaultAffineHighFirst, "cuda-affine-high-first");
  high_first.print("affine quants unpacked high first", "cases");
  high_first.expect_every_case_failed();
}

// MLA (value_from_key: each value its key row's first value_dim elements, no V pool) on
// both honest engines, every property, 12 generated cases; a kernel that reads the latent
// from the key row's end (kFaultMlaValueAtKeyEnd, the issue's "MLA value read from the
// wrong part of the key") fails every f32 case with a row where value_dim < head_dim.
TEST(CudaEngine, MlaValuesFromTheirKeysHoldEveryPropertyAndTheKeyEndFails) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.features.value_from_key = true;
  FaultTally at_end;
  for (int i = 0; i < 12; ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(scenario.layout.value_from_key) << "case " << i;
    if (i < honest_cases(12)) expect_every_property(scenario, i);
    if (scenario.layout.dtype == DType::f32 &&
        scenario.layout.value_dim < scenario.layout.head_dim) {
      at_end.judge(scenario, cuda::kFaultMlaValueAtKeyEnd, "cuda-mla-value-at-key-end");
    }
  }
  at_end.print("MLA value at the key's end", "cases with value_dim < head_dim");
  at_end.expect_every_case_failed();
}

// MLA over a ggml block key cache (llama.cpp's DeepSeek with -ctk q8_0: the value is whole
// blocks of the key's stored row, read back through K's block format) on both honest
// engines, every property, 12 generated cases in the five formats; the same cases with K in
// affine4 groups of 32 (which the generator does not draw under MLA: a fixture may have
// them) on these and the CPU engines; the kernel that reads the latent from the key row's
// end (kFaultMlaValueAtKeyEnd) fails every f32 case with a row where value_dim < head_dim.
TEST(CudaEngine, MlaLatentCachesInBlocksAndGroupsHoldEveryPropertyAndTheKeyEndFails) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.features.value_from_key = true;
  options.filters.kv_formats = {KvQuant::q8_0, KvQuant::q4_0, KvQuant::q4_1, KvQuant::q5_0,
                                KvQuant::q5_1};
  FaultTally at_end;
  for (int i = 0; i < 12; ++i) {
    const Scenario scenario = case_scenario(i, options);
    const Layout& l = scenario.layout;
    ASSERT_TRUE(l.value_from_key && is_ggml_block(l.k_format.quant) && !l.v_format.quantized() &&
                l.value_dim % kGgmlBlock == 0)
        << "case " << i;
    if (i < honest_cases(12)) expect_every_property(scenario, i);
    if (l.dtype == DType::f32 && l.value_dim < l.head_dim) {
      at_end.judge(scenario, cuda::kFaultMlaValueAtKeyEnd, "cuda-mla-value-at-key-end");
    }
    if (i >= honest_cases(12)) continue;
    Scenario grouped = scenario;
    grouped.layout.k_format = KvFormat{KvQuant::affine4, {}, 32};
    ASSERT_FALSE(validate(grouped)) << "case " << i;
    expect_every_property(grouped, i);
    for (const char* name : {"contiguous", "paged", "flash"}) {
      const EngineInfo* honest = find_engine(name);
      ASSERT_NE(honest, nullptr);
      for (const PropertyInfo& row : kProperties) {
        const PropertyOutcome outcome = judge_property(row.property, grouped, *honest);
        EXPECT_TRUE(outcome.pass) << name << " case " << i << ": " << outcome.report;
      }
    }
  }
  at_end.print("MLA value of a block cache at the key's end", "cases with value_dim < head_dim");
  at_end.expect_every_case_failed();
}

// RoPE's interleaved pairs and its part of the head (rope_dims: the head's last elements,
// MLA's decoupled RoPE part) on both honest engines, every property, 12 generated cases
// each; a kernel handed the part's offset as 0 (kFaultRopePartAtFront: GPT-NeoX's partial
// rotary where the layout has DeepSeek's [latent | RoPE part]) fails 5 of the first 6 f32
// cases, by 11.7 bounds at least (the sixth has q.k = 0 for every key, the generator's
// corner, so its rows do not depend on what RoPE turns).
TEST(CudaEngine, RopePairsAndPartsHoldEveryPropertyAndThePartAtTheFrontFails) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.features.rope_interleaved = true;
  for (int i = 0; i < honest_cases(12); ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_EQ(scenario.layout.rope_style, RopeStyle::interleaved) << "case " << i;
    expect_every_property(scenario, i);
  }
  options.filters.features = {.rope_dims = true};
  for (int i = 0; i < honest_cases(12); ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(scenario.layout.rope_dims.has_value()) << "case " << i;
    expect_every_property(scenario, i);
  }
  FaultTally at_front;
  at_front.judge_f32_cases(options, cuda::kFaultRopePartAtFront, "cuda-rope-part-at-front");
  at_front.print("RoPE part at the head's front", "cases");
  EXPECT_EQ(at_front.cases, 6);
  EXPECT_GE(at_front.failures, 5);
  EXPECT_GE(at_front.smallest_margin, 10);
}

// MLA over an fp8 key cache (vLLM's and FlashMLA's kv_cache_dtype=fp8: the value is the
// stored latent read back through K's format and scale) on both honest engines, every
// property, 12 generated cases; a kernel whose value pass reads the latent without K's scale
// (kFaultFp8VScaleDropped under MLA) fails every f32 case with a row whose K scales are all
// other than 1.
TEST(CudaEngine, MlaLatentCachesInFp8HoldEveryPropertyAndAValueWithoutItsScaleFails) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.features.value_from_key = true;
  options.filters.kv_formats = {KvQuant::fp8_e4m3fn, KvQuant::fp8_e5m2};
  FaultTally dropped;
  for (int i = 0; i < 12; ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(scenario.layout.value_from_key && is_fp8(scenario.layout.k_format.quant) &&
                !scenario.layout.v_format.quantized())
        << "case " << i;
    if (i < honest_cases(12)) expect_every_property(scenario, i);
    const std::vector<double>& k_scales = scenario.layout.k_format.scale;
    if (scenario.layout.dtype == DType::f32 &&
        std::all_of(k_scales.begin(), k_scales.end(), [](double x) { return x != 1.0; })) {
      dropped.judge(scenario, cuda::kFaultFp8VScaleDropped, "cuda-mla-fp8-scale-dropped");
    }
  }
  dropped.print("MLA latent read without K's scale", "cases whose every K scale is other than 1");
  dropped.expect_every_case_failed();
}

// ggml's block formats on both honest engines, every property, 12 generated cases with K
// and V in the five formats; a kernel that reads a q4_0 key block's nibbles the other way
// (kFaultQ4NibblesSwapped, the "q4_0 block's nibble order swapped") fails where
// the two halves of a key block differ: 5 of the first 6 f32 cases forced to q4_0 keys (the
// sixth has q = k = 0, the generator's corner: its keys read the same either way).
TEST(CudaEngine, BlockCachesHoldEveryPropertyAndSwappedNibblesFail) {
  GeneratorOptions options;
  options.supports = cuda::cuda_f32_options().supports;
  options.filters.kv_formats = {KvQuant::q8_0, KvQuant::q4_0, KvQuant::q4_1, KvQuant::q5_0,
                                KvQuant::q5_1};
  for (int i = 0; i < honest_cases(12); ++i) {
    const Scenario scenario = case_scenario(i, options);
    ASSERT_TRUE(scenario.layout.quantized_kv()) << "case " << i;
    expect_every_property(scenario, i);
  }
  // The fault on cases forced to q4_0 keys (f32 layouts: the f32 engine's).
  options.filters.kv_formats = {KvQuant::q4_0};
  FaultTally swapped;
  swapped.judge_f32_cases(options, cuda::kFaultQ4NibblesSwapped, "cuda-q4_0-nibbles-swapped");
  swapped.print("q4_0 nibbles swapped", "cases");
  EXPECT_EQ(swapped.cases, 6);
  EXPECT_GE(swapped.failures, 5);
}

// A sink is one term of a row's softmax, however many splits a decode takes: q = k = 0 and
// v_j = j over 40 keys, a sink of logit ln 3 (weight 3), decoded at position 39 over two
// splits of 32 keys: the row is 780 / (40 + 3) = 18.14. With the sink counted once per split
// that holds keys (kFaultSinkPerSplit), 780 / (40 + 6) = 16.96: 1.18 off, against a bound
// near 1e-4 (the generated cases above show it less often: a sink of -30 or one far below
// the scores weighs nothing, and most decodes there take one split).
TEST(CudaEngine, ASinkJoinsADecodeOverSplitsOnce) {
  for (const bool fault : {false, true}) {
    EngineConfig config;
    config.layout = test::make_layout({.page_size = 16});
    config.layout.sinks = {std::log(3.0)};
    config.page_order = {0, 1, 2, 3};
    cuda::CudaEngineOptions options = cuda::cuda_f32_options();
    if (fault) options.faults = cuda::kFaultSinkPerSplit;
    cuda::CudaEngine engine(config, options);
    std::vector<float> zeros(40, 0.0f), values(40);
    for (int j = 0; j < 40; ++j) values[static_cast<size_t>(j)] = static_cast<float>(j);
    std::vector<ChunkOut> out(1);
    engine.step(
        std::vector<ChunkIn>{{0, 39, {zeros.data(), 39}, {zeros.data(), 39}, {values.data(), 39}}},
        out);
    engine.step(
        std::vector<ChunkIn>{{0, 1, {zeros.data(), 1}, {zeros.data(), 1}, {values.data() + 39, 1}}},
        out);
    ASSERT_EQ(out[0].positions, (std::vector<int64_t>{39}));
    const double expected = fault ? 780.0 / 46.0 : 780.0 / 43.0;
    EXPECT_NEAR(out[0].out[0], expected, 1e-4) << (fault ? "with the fault" : "honest");
  }
}

// An honest kernel has no race, so its rows are the same bits whichever order the
// launcher runs a block's threads in: every ThreadOrder (random with two seeds) on the
// first 10 generated cases, both honest engines, against thread order.
TEST(CudaEngine, HonestKernelsGiveTheSameBitsUnderEveryThreadOrder) {
  std::vector<ThreadSchedule> schedules;
  for (const ThreadOrder order : kThreadOrders) schedules.push_back({order, 0});
  schedules.push_back({ThreadOrder::random, 12345});
  int rows = 0;
  for (const char* name : {"cuda-paged", "cuda-paged-bf16"}) {
    const EngineInfo* engine = find_engine(name);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < honest_cases(10); ++i) {
      Scenario scenario = case_scenario(i);
      if (std::string(name) == "cuda-paged-bf16") scenario.layout.dtype = DType::bf16;
      const Prepared prepared = prepare(scenario);
      std::vector<EngineRun> runs;
      for (const ThreadSchedule& schedule : schedules) {
        scenario.placement.threads = schedule;
        runs.push_back(judge_engine(scenario, prepared, *engine).run);
        ASSERT_FALSE(runs.back().error) << name << " case " << i << ": " << *runs.back().error;
      }
      for (size_t s = 1; s < runs.size(); ++s) {
        ASSERT_EQ(runs[s].rows.size(), runs[0].rows.size());
        for (size_t r = 0; r < runs[0].rows.size(); ++r) {
          const std::vector<float>& a = runs[0].rows[r].values;
          const std::vector<float>& b = runs[s].rows[r].values;
          ASSERT_EQ(a.size(), b.size());
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
              << name << " case " << i << " row " << r << " under order "
              << thread_order_name(schedules[s].order);
        }
      }
      rows += static_cast<int>(runs[0].rows.size());
    }
  }
  EXPECT_GT(rows, 0);
}

// The hazard mutants (cuda/paged_kv.cuh) on the first 20 generated cases. Each gives the
// right rows in thread order, so the launcher without its checks passes every case; with
// them (the default) each case with a decode fails with the hazard's own kind, whatever
// thread order the case drew. Measured when written: each fails 15 of 20 (the cases with
// a decode), all with its kind; with the checks off, 0 of 20.
struct HazardMutant {
  const char* name;
  FailureKind kind;
  int fails;
};

void PrintTo(const HazardMutant& m, std::ostream* os) {
  *os << m.name;
}

class HazardMutantNamed : public testing::TestWithParam<HazardMutant> {};

TEST_P(HazardMutantNamed, ByItsKindWhereTheThreadOrderHidesIt) {
  const HazardMutant& m = GetParam();
  const EngineInfo* mutant = find_engine(m.name);
  ASSERT_TRUE(mutant && mutant->mutant);
  int failed = 0, failed_unchecked = 0;
  for (int i = 0; i < 20; ++i) {
    Scenario scenario = case_scenario(i);
    const PropertyOutcome checked = judge_property(Property::prefix, scenario, *mutant);
    if (!checked.pass) {
      ++failed;
      ASSERT_TRUE(checked.first.has_value()) << checked.report;
      EXPECT_EQ(checked.first->kind, m.kind) << "case " << i << ": " << checked.report;
      EXPECT_NE(checked.report.find("kernel hazard: " + std::string(failure_kind_name(m.kind))),
                std::string::npos)
          << checked.report;
    }
    // The launcher as it was: thread order, no checks.
    scenario.placement.threads = {};
    const simt::LaunchSettings unchecked({}, simt::Checks{false, false});
    const PropertyOutcome plain = judge_property(Property::prefix, scenario, *mutant);
    if (!plain.pass) ++failed_unchecked;
    EXPECT_TRUE(plain.pass) << "case " << i << ": " << plain.report;
  }
  std::cout << m.name << ": " << failed << " of 20 cases named " << failure_kind_name(m.kind)
            << "; without the checks " << failed_unchecked << " of 20 failed\n";
  EXPECT_GE(failed, m.fails);
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, HazardMutantNamed,
    testing::Values(HazardMutant{"cuda-race-unsynced-pages", FailureKind::race, 10},
                    HazardMutant{"cuda-barrier-per-branch", FailureKind::barrier_divergence, 10},
                    HazardMutant{"cuda-race-merge-no-syncwarp", FailureKind::race, 10}),
    test_name<HazardMutant>);

// The thread order alone shows the merge's race in the rows: reversed, lane 31 reads the
// weights before lane 0 has written them (poison, NaN), so with the checks off the rows are
// not finite where thread order gives them right.
TEST(CudaEngine, AReversedThreadOrderShowsTheLockstepRaceInTheRows) {
  const EngineInfo* mutant = find_engine("cuda-race-merge-no-syncwarp");
  ASSERT_NE(mutant, nullptr);
  const simt::LaunchSettings unchecked({}, simt::Checks{false, false});
  int shown = 0;
  for (int i = 0; i < 20; ++i) {
    Scenario scenario = case_scenario(i);
    scenario.placement.threads = {ThreadOrder::reversed, 0};
    const PropertyOutcome outcome = judge_property(Property::prefix, scenario, *mutant);
    if (outcome.pass) continue;
    ++shown;
    ASSERT_TRUE(outcome.first.has_value());
    EXPECT_EQ(outcome.first->kind, FailureKind::not_finite) << outcome.report;
  }
  EXPECT_GE(shown, 10);
}

}  // namespace
}  // namespace kvfuzz
