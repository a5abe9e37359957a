// Model-level checks per second (docs/BENCHMARKS.md, "Model level"): judge_model on a
// 2-layer transformer (width 64, ffn 128, vocab 256) over 128 tokens, per honest engine,
// with the parts timed apart: the cached forward (weights + one engine per layer over the
// program), the reference (one double-precision full-prefix pass) and the rest of
// judge_model (the tolerance's perturbed reference passes and the judging).
// A second table: three engines times six properties on each scenario, with the tolerance's
// perturbed passes shared across them (model_tolerance.h) and not.
// Usage: bench_model [--seconds S] [--repeats R]. Prints Markdown tables of medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kvfuzz/engine.h"
#include "model/model_check.h"
#include "model/model_tolerance.h"
#include "model/reference_forward.h"
#include "model/transformer.h"

namespace kvfuzz {
namespace {

using bench::median;

using Clock = std::chrono::steady_clock;

// One sequence: a prefill of 96 tokens, then 32 one-token decodes. 4 q heads over 2 kv
// heads, head_dim 16, RoPE, page size 16; each check its own weights seed.
Scenario make_scenario(DType dtype, uint64_t seed) {
  Scenario s;
  s.name = "bench-model";
  s.layout.q_heads = 4;
  s.layout.kv_heads = 2;
  s.layout.head_dim = 16;
  s.layout.value_dim = 16;
  s.layout.page_size = 16;
  s.layout.rope_theta = 10000.0;
  s.layout.dtype = dtype;
  s.model = ModelConfig{.vocab = 256, .width = 64, .layers = 2, .ffn = 128, .seed = seed};
  s.tokens = GeneratedTokens{0, 256};
  std::vector<int> prefill;
  for (int t = 0; t < 96; ++t) prefill.push_back((t * 37 + 11) % 256);
  s.program.push_back(Op::append(0, prefill));
  for (int t = 0; t < 32; ++t) s.program.push_back(Op::append(0, {(t * 53 + 5) % 256}));
  return s;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Sample {
  double checks_per_second = 0, forward = 0, reference = 0, rest = 0;
};

Sample measure(const EngineInfo& engine, DType dtype, double budget, uint64_t& seed) {
  double total = 0, forward = 0, reference = 0;
  long checks = 0;
  while (total < budget) {
    const Scenario s = make_scenario(dtype, ++seed);
    auto start = Clock::now();
    const ModelVerdict verdict = judge_model(s, engine);
    total += seconds_since(start);
    if (!verdict.pass) {
      std::fprintf(stderr, "%s failed:\n%s", engine.name.c_str(),
                   describe_model_divergence(verdict).c_str());
      std::exit(1);
    }
    ++checks;
    // The parts, timed apart on the same scenario.
    start = Clock::now();
    const TransformerWeights w = make_weights(*s.model, s.layout);
    const std::vector<const EngineInfo*> engines{&engine, &engine};
    const TransformerRun run = run_transformer(s, w, engines);
    forward += seconds_since(start);
    start = Clock::now();
    const auto ref = reference_transformer(s, w);
    reference += seconds_since(start);
    if (run.rows.size() != ref.size()) std::exit(2);
  }
  const double n = static_cast<double>(checks);
  return {n / total, forward / n, reference / n,
          std::max(0.0, total / n - forward / n - reference / n)};
}

// What `kvfuzz check --model` does per case: the three default-numerics attention engines
// (contiguous, paged, flash), each on all six properties of the scenario (prefix, then each
// invariance's variants). Properties per second with the bounds cache on (the perturbed
// passes shared by the engines and by the variants with the scenario's streams) and with it
// emptied before every property (each property still shares within its own variants).
double shared_rate(DType dtype, double budget, uint64_t& seed, bool share) {
  const std::vector<const EngineInfo*> engines{find_engine("contiguous"), find_engine("paged"),
                                               find_engine("flash")};
  double total = 0;
  long judged = 0;
  while (total < budget) {
    const Scenario s = make_scenario(dtype, ++seed);
    const auto start = Clock::now();
    for (const EngineInfo* engine : engines) {
      for (const PropertyInfo& p : kProperties) {
        if (!share) model::clear_model_bounds_cache();
        if (!judge_model_property(p.property, s, *engine).pass) std::exit(1);
        ++judged;
      }
    }
    total += seconds_since(start);
  }
  return static_cast<double>(judged) / total;
}

}  // namespace
}  // namespace kvfuzz

int main(int argc, char** argv) {
  using namespace kvfuzz;
  const auto runs = bench::parse_timed_runs(argc, argv);
  if (!runs) {
    std::fprintf(stderr, "usage: bench_model [--seconds S] [--repeats R]\n");
    return 2;
  }
  const double seconds = runs->seconds;
  const int repeats = runs->repeats;
  std::printf(
      "| dtype | engine | checks/s | cached forward | reference | tolerance + judge |\n"
      "|---|---|---:|---:|---:|---:|\n");
  uint64_t seed = 0;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const EngineInfo& engine : engine_registry()) {
      if (engine.mutant) continue;
      std::vector<double> rate, forward, reference, rest;
      for (int r = 0; r < repeats; ++r) {
        const Sample s = measure(engine, dtype, seconds, seed);
        rate.push_back(s.checks_per_second);
        forward.push_back(s.forward * 1e3);
        reference.push_back(s.reference * 1e3);
        rest.push_back(s.rest * 1e3);
      }
      std::printf("| %s | %s | %.1f | %.2f ms | %.2f ms | %.2f ms |\n",
                  std::string(dtype_name(dtype)).c_str(), engine.name.c_str(), median(rate),
                  median(forward), median(reference), median(rest));
    }
  }
  std::printf(
      "\n| dtype | 3 engines x 6 properties per scenario | properties/s, passes shared | "
      "properties/s, not shared |\n|---|---|---:|---:|\n");
  for (DType dtype : {DType::f32}) {
    std::vector<double> shared, alone;
    for (int r = 0; r < repeats; ++r) {
      shared.push_back(shared_rate(dtype, seconds, seed, true));
      alone.push_back(shared_rate(dtype, seconds, seed, false));
    }
    std::printf("| %s | judge_model_property | %.2f | %.2f |\n",
                std::string(dtype_name(dtype)).c_str(), median(shared), median(alone));
  }
  return 0;
}
