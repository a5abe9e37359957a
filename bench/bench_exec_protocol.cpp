// What the exec: door costs (docs/engine-protocol.md): per engine, making it (the start of
// its process with hello; for an engine of protocol version 2, whose processes are reused,
// a new_case in the process the last engine gave back: KVFUZZ_EXEC_PROTOCOL=1 measures the
// start instead), its end, one decode step (1 token after a 64-token prefill) and one 64-token
// chunk, at a typical layout (8 q heads over 2 kv heads, head_dim 32, f32). Medians over
// repeats. Compared engines: a Python engine that answers zeros (bench/exec_zero_engine.py:
// the protocol alone), the honest Python example, and the built-in contiguous engine.
//
// Usage: bench_exec_protocol [--repeats R] [--python PATH] [--engine SPEC]...
// Prints a Markdown table for docs/BENCHMARKS.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {
namespace {

using bench::median;

using Clock = std::chrono::steady_clock;

constexpr int kPrefill = 64;

Layout typical_layout() {
  Layout layout;
  layout.q_heads = 8;
  layout.kv_heads = 2;
  layout.head_dim = 32;
  layout.value_dim = 32;
  return layout;
}

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// The q/k/v of tokens [first, first + count) of the table, as one chunk of sequence 0.
struct ChunkData {
  std::vector<float> q, k, v;
  ChunkIn chunk(int tokens) const { return ChunkIn{0, tokens, q, k, v}; }
};

ChunkData gather(const TokenTable& table, int first, int count) {
  ChunkData data;
  for (int t = first; t < first + count; ++t) {
    data.q.insert(data.q.end(), table.q(t).begin(), table.q(t).end());
    data.k.insert(data.k.end(), table.k(t).begin(), table.k(t).end());
    data.v.insert(data.v.end(), table.v(t).begin(), table.v(t).end());
  }
  return data;
}

void step(Engine& engine, const ChunkData& data, int tokens) {
  const ChunkIn in = data.chunk(tokens);
  std::vector<ChunkOut> out(1);
  engine.step(std::span<const ChunkIn>(&in, 1), out);
}

struct Medians {
  double start = 0, close = 0, decode = 0, chunk_dyadic = 0, chunk_uniform = 0;
};

Medians measure(const EngineInfo& info, int repeats) {
  EngineConfig config;
  config.layout = typical_layout();
  config.page_order.resize(64);
  for (int i = 0; i < 64; ++i) config.page_order[static_cast<size_t>(i)] = i;
  const int tokens = kPrefill + repeats;
  const TokenTable dyadic(GeneratedTokens{1, tokens, Distribution::dyadic, false}, config.layout);
  const TokenTable uniform(GeneratedTokens{2, kPrefill, Distribution::uniform, false},
                           config.layout);
  const ChunkData prefill = gather(dyadic, 0, kPrefill);
  const ChunkData first = gather(dyadic, 0, 1);
  const ChunkData full_precision = gather(uniform, 0, kPrefill);

  std::vector<double> start, close, decode, chunk_dyadic, chunk_uniform;
  for (int r = 0; r < std::max(3, repeats / 3); ++r) {
    auto t = Clock::now();
    std::unique_ptr<Engine> engine = info.make(config);
    start.push_back(micros_since(t));
    step(*engine, first, 1);  // a process that has answered a step, as in a check
    t = Clock::now();
    engine.reset();
    close.push_back(micros_since(t));
  }

  std::unique_ptr<Engine> engine = info.make(config);
  for (int r = 0; r < repeats; ++r) {
    engine->reset(0);
    auto t = Clock::now();
    step(*engine, prefill, kPrefill);
    chunk_dyadic.push_back(micros_since(t));
    engine->reset(0);
    t = Clock::now();
    step(*engine, full_precision, kPrefill);
    chunk_uniform.push_back(micros_since(t));
  }
  engine->reset(0);
  step(*engine, prefill, kPrefill);
  for (int r = 0; r < repeats; ++r) {
    const ChunkData one = gather(dyadic, kPrefill + r, 1);
    const auto t = Clock::now();
    step(*engine, one, 1);
    decode.push_back(micros_since(t));
  }
  return {median(start), median(close), median(decode), median(chunk_dyadic),
          median(chunk_uniform)};
}

std::string us(double micros) {
  char text[32];
  if (micros >= 1000) {
    std::snprintf(text, sizeof text, "%.1f ms", micros / 1000);
  } else {
    std::snprintf(text, sizeof text, "%.1f us", micros);
  }
  return text;
}

}  // namespace
}  // namespace kvfuzz

int main(int argc, char** argv) {
  using namespace kvfuzz;
  int repeats = 30;
  std::string python = "python3";
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(3, std::atoi(argv[++i]));
    } else if (arg == "--python" && i + 1 < argc) {
      python = argv[++i];
    } else if (arg == "--engine" && i + 1 < argc) {
      specs.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_exec_protocol [--repeats R] [--python PATH] [--engine SPEC]...\n");
      return 2;
    }
  }
  const std::string source = KVFUZZ_SOURCE_DIR;
  if (specs.empty()) {
    specs = {"exec:" + python + " " + source + "/bench/exec_zero_engine.py",
             "exec:" + python + " " + source + "/examples/python-engine/honest_engine.py",
             "contiguous"};
  }
  std::vector<std::pair<std::string, Medians>> results;
  for (const std::string& spec : specs) {
    try {
      results.emplace_back(spec, measure(*resolve_engine(spec), repeats));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  const Medians& base = results.back().second;  // the last engine: the built-in one
  std::printf(
      "| engine | make (start + hello, or new_case) | end | decode step | 64-token chunk (dyadic) "
      "| 64-token chunk "
      "(full-precision floats) | decode / %s | chunk / %s |\n",
      results.back().first.c_str(), results.back().first.c_str());
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [spec, m] : results) {
    std::printf("| %s | %s | %s | %s | %s | %s | %.0f | %.0f |\n", spec.c_str(),
                us(m.start).c_str(), us(m.close).c_str(), us(m.decode).c_str(),
                us(m.chunk_dyadic).c_str(), us(m.chunk_uniform).c_str(), m.decode / base.decode,
                m.chunk_dyadic / base.chunk_dyadic);
  }
  return 0;
}
