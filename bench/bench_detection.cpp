// Detection benchmark: for every mutant, how many cases and seconds kvfuzz needs to reject
// it (median over 20 seeds), how small the shrunk fixture is and how long shrinking takes;
// side by side with a fixed parameter grid of the kind mainstream kernel test suites use
// (query length x cached length x page size x head layout, identity page order, no resets,
// no batches, no truncate or fork). Usage: bench_detection [--seeds N] [--max-cases N]
// Prints Markdown for docs/BENCHMARKS.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"

namespace kvfuzz {
namespace {

using bench::median;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The first property that fails, if any.
std::optional<Property> failing_property(const Scenario& s, const EngineInfo& engine) {
  for (Property p : kAllProperties) {
    if (!judge_property(p, s, engine).pass) return p;
  }
  return std::nullopt;
}

// The grid: one sequence, a cached prefix appended as one chunk, then a query chunk.
std::vector<Scenario> grid_scenarios() {
  struct Heads {
    int q, kv;
  };
  std::vector<Scenario> grid;
  uint64_t seed = 1;
  for (int query : {1, 4, 16}) {
    for (int cached : {0, 1, 7, 16, 33}) {
      for (int page : {1, 4, 16}) {
        for (Heads heads : {Heads{1, 1}, Heads{4, 4}, Heads{4, 2}, Heads{8, 1}}) {
          Scenario s;
          s.name = "grid";
          s.layout.q_heads = heads.q;
          s.layout.kv_heads = heads.kv;
          s.layout.head_dim = 16;
          s.layout.value_dim = 16;
          s.layout.page_size = page;
          s.tokens = GeneratedTokens{seed++, cached + query, Distribution::uniform, false};
          std::vector<int> ids(static_cast<size_t>(cached + query));
          std::iota(ids.begin(), ids.end(), 0);
          if (cached > 0) s.program.push_back(Op::append(0, {ids.begin(), ids.begin() + cached}));
          s.program.push_back(Op::append(0, {ids.begin() + cached, ids.end()}));
          grid.push_back(std::move(s));
        }
      }
    }
  }
  return grid;
}

int64_t tokens_of(const Scenario& s) {
  int64_t n = 0;
  for (const Op& op : s.program) {
    for (const Chunk& c : op.batch()) n += static_cast<int64_t>(c.tokens.size());
  }
  return n;
}

struct Detection {
  int found = 0;  // seeds (or the grid) that rejected the mutant
  std::vector<double> cases, seconds, shrunk_tokens, shrunk_ops, shrink_seconds;
};

}  // namespace
}  // namespace kvfuzz

int main(int argc, char** argv) {
  using namespace kvfuzz;
  int seeds = 20, max_cases = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seeds") == 0) {
      seeds = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--max-cases") == 0) {
      max_cases = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: bench_detection [--seeds N] [--max-cases N]\n");
      return 2;
    }
  }
  const std::vector<Scenario> grid = grid_scenarios();
  std::printf(
      "| mutant | kvfuzz: rejected | cases (median) | seconds (median) | shrunk tokens / ops "
      "(median) | shrink s (median) | grid (%zu cases): rejected | grid cases | grid s |\n",
      grid.size());
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const EngineInfo& engine : engine_registry()) {
    if (!engine.mutant) continue;
    Detection kv;
    for (int seed = 1; seed <= seeds; ++seed) {
      const auto start = Clock::now();
      PrngChoiceSource choices(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull);
      for (int c = 1; c <= max_cases; ++c) {
        const Scenario s = generate_scenario(choices);
        const std::optional<Property> failed = failing_property(s, engine);
        if (!failed) continue;
        kv.cases.push_back(c);
        kv.seconds.push_back(seconds_since(start));
        ++kv.found;
        ShrinkOptions options;
        options.property = *failed;
        options.time_budget_seconds = 30;
        const auto shrink_start = Clock::now();
        if (const auto shrunk = shrink(s, engine, options)) {
          kv.shrink_seconds.push_back(seconds_since(shrink_start));
          kv.shrunk_tokens.push_back(static_cast<double>(tokens_of(shrunk->scenario)));
          kv.shrunk_ops.push_back(static_cast<double>(shrunk->scenario.program.size()));
        }
        break;
      }
    }
    std::optional<int> grid_case;
    const auto grid_start = Clock::now();
    for (size_t i = 0; i < grid.size() && !grid_case; ++i) {
      if (!judge_property(Property::prefix, grid[i], engine).pass) {
        grid_case = static_cast<int>(i) + 1;
      }
    }
    const double grid_seconds = seconds_since(grid_start);
    std::printf("| %s | %d/%d | %.0f | %.3f | %.0f / %.0f | %.3f | %s | %s | %.3f |\n",
                engine.name.c_str(), kv.found, seeds, median(kv.cases), median(kv.seconds),
                median(kv.shrunk_tokens), median(kv.shrunk_ops), median(kv.shrink_seconds),
                grid_case ? "yes" : "no", grid_case ? std::to_string(*grid_case).c_str() : "-",
                grid_seconds);
    std::fflush(stdout);
  }
  return 0;
}
