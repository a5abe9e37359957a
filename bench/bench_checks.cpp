// For three fixed scenario shapes: first the reference alone, plain form against blocked form
// (CPU time, and GFLOP/s of the attention flops); then checks per second per engine, with the
// time split between generate (scenario + token table), engine (construction + program),
// reference and compare. Usage: bench_checks [--seconds S] [--repeats R] [--engines A,B]
// [--scenarios tiny,small,medium] (--engines or --scenarios also leave out the reference-only
// table; a profiler then sees one engine's checks alone).
// Prints two Markdown tables (medians over R repeats) for docs/BENCHMARKS.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_support.h"
#include "judge/compare.h"
#include "judge/reference.h"
#include "kvfuzz/judge.h"
#include "run/runner.h"

namespace kvfuzz {
namespace {

using bench::median;

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int q_heads, kv_heads, head_dim, sequences, tokens_per_sequence;
};

// Each sequence: a prefill of 3/4 of its tokens, then one-token decodes batched over all
// sequences (one step per decode round).
Scenario make_scenario(const Shape& shape, uint64_t seed) {
  Scenario s;
  s.name = shape.name;
  s.layout.q_heads = shape.q_heads;
  s.layout.kv_heads = shape.kv_heads;
  s.layout.head_dim = shape.head_dim;
  s.layout.value_dim = shape.head_dim;
  s.layout.page_size = 16;
  s.sequences = shape.sequences;
  const int total = shape.sequences * shape.tokens_per_sequence;
  s.tokens = GeneratedTokens{seed, total, Distribution::dyadic, false};
  const int prefill = shape.tokens_per_sequence * 3 / 4;
  int next = 0;
  for (int seq = 0; seq < shape.sequences; ++seq) {
    std::vector<int> tokens(static_cast<size_t>(prefill));
    for (int& t : tokens) t = next++;
    s.program.push_back(Op::append(seq, std::move(tokens)));
  }
  for (int round = prefill; round < shape.tokens_per_sequence; ++round) {
    std::vector<Chunk> chunks;
    for (int seq = 0; seq < shape.sequences; ++seq) chunks.push_back({seq, {next++}});
    s.program.push_back(Op::step(std::move(chunks)));
  }
  return s;
}

struct Split {
  double generate = 0, engine = 0, reference = 0, compare = 0;
  long checks = 0;
  double total() const { return generate + engine + reference + compare; }
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Full checks, each with a fresh seed, until `budget` seconds have passed.
Split measure(const Shape& shape, const EngineInfo& engine, double budget, uint64_t& seed) {
  Split split;
  while (split.total() < budget) {
    auto t = Clock::now();
    const Scenario scenario = make_scenario(shape, seed++);
    const TokenTable table(scenario.tokens, scenario.layout);
    split.generate += seconds_since(t);

    t = Clock::now();
    const auto instance = engine.make(engine_config(scenario));
    const EngineRun run = run_engine(scenario, table, *instance);
    split.engine += seconds_since(t);

    // Under the numerics the engine declares (as judge_engine does).
    const EngineNumerics numerics = instance->numerics();
    t = Clock::now();
    ReferenceMap reference;
    for (const LogicalStream& stream : logical_streams(scenario)) {
      for (ReferenceRow& row : reference_rows(scenario.layout, table, stream, numerics)) {
        const RowKey key = row.key;
        reference.emplace(key, std::move(row));
      }
    }
    const auto slots = expected_slots(scenario);
    split.reference += seconds_since(t);

    t = Clock::now();
    const Verdict verdict = compare(slots, reference, run, scenario.layout.q_heads,
                                    scenario.layout.value_dim, numerics.output);
    split.compare += seconds_since(t);
    if (!verdict.pass) {
      std::fprintf(stderr, "bench: %s failed on %s\n", engine.name.c_str(), shape.name);
      std::exit(1);
    }
    ++split.checks;
  }
  return split;
}

// This thread's CPU time: on a shared machine, wall time counts the other processes too.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The reference alone, plain and blocked form, on `shape`: CPU seconds per scenario (median of
// `repeats` runs of about `budget` seconds each, the two forms alternating).
struct ReferenceTimes {
  double plain = 0, blocked = 0;
};

ReferenceTimes time_reference(const Shape& shape, double budget, int repeats) {
  const Scenario scenario = make_scenario(shape, 1);
  const TokenTable table(scenario.tokens, scenario.layout);
  const std::vector<LogicalStream> streams = logical_streams(scenario);
  const auto time = [&](auto rows_of) {
    long runs = 0;
    const double start = cpu_seconds();
    while (cpu_seconds() - start < budget) {
      for (const LogicalStream& stream : streams) {
        if (rows_of(stream).empty()) std::exit(3);
      }
      ++runs;
    }
    return (cpu_seconds() - start) / static_cast<double>(runs);
  };
  std::vector<double> plain, blocked;
  for (int r = 0; r < repeats; ++r) {
    plain.push_back(time(
        [&](const LogicalStream& s) { return reference_rows_plain(scenario.layout, table, s); }));
    blocked.push_back(
        time([&](const LogicalStream& s) { return reference_rows(scenario.layout, table, s); }));
  }
  return {median(plain), median(blocked)};
}

// The attention flops of a shape: 4 * head_dim per (row, q head, visible key), a multiply and
// an add each for the score and for the weighted sum (the softmax and the tolerance's sums
// not counted).
double attention_flops(const Shape& shape) {
  const double pairs = static_cast<double>(shape.tokens_per_sequence) *
                       (shape.tokens_per_sequence + 1) / 2 * shape.sequences * shape.q_heads;
  return pairs * 4 * shape.head_dim;
}

}  // namespace
}  // namespace kvfuzz

int main(int argc, char** argv) {
  using namespace kvfuzz;
  // --engines and --scenarios are taken out here; the rest is parse_timed_runs'.
  std::vector<char*> timed{argv[0]};
  std::vector<std::string> engines, scenarios;
  const auto split_list = [](std::string_view list) {
    std::vector<std::string> names;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      names.emplace_back(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return names;
  };
  bool bad = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--engines" || arg == "--scenarios") && i + 1 < argc) {
      (arg == "--engines" ? engines : scenarios) = split_list(argv[++i]);
    } else if (arg == "--engines" || arg == "--scenarios") {
      bad = true;
    } else {
      timed.push_back(argv[i]);
    }
  }
  const auto runs = bench::parse_timed_runs(static_cast<int>(timed.size()), timed.data());
  if (!runs || bad) {
    std::fprintf(stderr,
                 "usage: bench_checks [--seconds S] [--repeats R] [--engines A,B] "
                 "[--scenarios tiny,small,medium]\n");
    return 2;
  }
  const auto wanted = [](const std::vector<std::string>& names, std::string_view name) {
    return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const std::string& name : engines) {
    if (find_engine(name) == nullptr) {
      std::fprintf(stderr, "bench_checks: --engines: no built-in engine '%s'\n", name.c_str());
      return 2;
    }
  }
  const double seconds = runs->seconds;
  const int repeats = runs->repeats;
  const std::pair<std::string_view, Shape> all_shapes[] = {
      {"tiny", {"tiny (1/1 heads, d 1, 8 tokens)", 1, 1, 1, 1, 8}},
      {"small", {"small (4/2 heads, d 16, 64 tokens)", 4, 2, 16, 1, 64}},
      {"medium", {"medium (8/2 heads, d 64, 4 x 128 tokens)", 8, 2, 64, 4, 128}},
  };
  std::vector<Shape> shapes;
  for (const auto& [name, shape] : all_shapes) {
    if (wanted(scenarios, name)) shapes.push_back(shape);
  }
  if (shapes.size() != scenarios.size() && !scenarios.empty()) {
    std::fprintf(stderr, "bench_checks: --scenarios: expected names from tiny, small, medium\n");
    return 2;
  }
  if (engines.empty() && scenarios.empty())
    std::printf(
        "| scenario | plain reference | blocked reference | plain GFLOP/s | blocked GFLOP/s |\n"
        "|---|---:|---:|---:|---:|\n");
  for (const Shape& shape : shapes) {
    if (!engines.empty() || !scenarios.empty()) break;
    const ReferenceTimes t = time_reference(shape, seconds, repeats);
    const double flops = attention_flops(shape) * 1e-9;
    std::printf("| %s | %.1f us | %.1f us | %.2f | %.2f |\n", shape.name, t.plain * 1e6,
                t.blocked * 1e6, flops / t.plain, flops / t.blocked);
    std::fflush(stdout);
  }
  std::printf("\n");
  std::printf(
      "| scenario | engine | checks/s | generate | engine | reference | compare | harness/engine "
      "|\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  uint64_t seed = 1;
  for (const Shape& shape : shapes) {
    for (const EngineInfo& engine : engine_registry()) {
      if (engine.mutant || !wanted(engines, engine.name)) continue;
      std::vector<double> rate, gen, eng, ref, cmp, ratio;
      for (int r = 0; r < repeats; ++r) {
        const Split s = measure(shape, engine, seconds, seed);
        const double n = static_cast<double>(s.checks);
        rate.push_back(n / s.total());
        gen.push_back(s.generate / n * 1e6);
        eng.push_back(s.engine / n * 1e6);
        ref.push_back(s.reference / n * 1e6);
        cmp.push_back(s.compare / n * 1e6);
        ratio.push_back((s.generate + s.reference + s.compare) / s.engine);
      }
      std::printf("| %s | %s | %.0f | %.1f us | %.1f us | %.1f us | %.1f us | %.2f |\n", shape.name,
                  engine.name.c_str(), median(rate), median(gen), median(eng), median(ref),
                  median(cmp), median(ratio));
      std::fflush(stdout);
    }
  }
  return 0;
}
