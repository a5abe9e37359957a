// exec:COMMAND: an engine in another process, any language, speaking JSON lines on its
// stdin and stdout (docs/engine-protocol.md). Each Engine made is one process of its own,
// so no state leaks between the engines of a run (a fresh engine per case, per property
// variant, per shrink candidate); its start-up is part of what a check costs
// (docs/BENCHMARKS.md, "Engine protocol").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "doors/exec_process.h"
#include "doors/exec_protocol.h"
#include "doors/external_engines.h"

namespace kvfuzz::doors {

namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{10'000};
constexpr double kMostTimeoutSeconds = 86'400;

// KVFUZZ_ENGINE_TIMEOUT: seconds (a decimal number) that each request may take, hello
// (and so the engine's start-up) included. Read once, when the engine is resolved.
std::chrono::milliseconds engine_timeout(const std::string& spec) {
  const char* text = std::getenv("KVFUZZ_ENGINE_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultTimeout;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 ||
      seconds > kMostTimeoutSeconds) {
    throw EngineSpecError("--engine " + spec +
                          ": KVFUZZ_ENGINE_TIMEOUT: expected a number of seconds in (0, 86400], "
                          "got '" +
                          std::string(text) + "'");
  }
  // At least a millisecond: poll() counts in them.
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(seconds * 1000)));
}

class ExecEngine final : public Engine {
 public:
  ExecEngine(const std::string& command, const EngineConfig& config,
             std::chrono::milliseconds timeout)
      : layout_(config.layout), process_(command, timeout) {
    hello_ = read_hello_reply(process_.exchange(hello_request(config), "hello", kSmallReplyLimit));
  }

  const std::string& name() const { return hello_.name; }
  EngineCapabilities capabilities() const override { return hello_.capabilities; }
  BitwiseClaims bitwise_claims() const override { return hello_.bitwise; }
  EngineNumerics numerics() const override { return hello_.numerics; }
  EngineSupports supports() const override { return hello_.supports; }

  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    if (outs.size() != chunks.size()) {
      throw EngineError("step: " + std::to_string(chunks.size()) + " chunks but " +
                        std::to_string(outs.size()) + " outputs");
    }
    // step_request() checks every span's size against the layout before it reads one.
    const std::string request = step_request(chunks, layout_);
    const std::string reply = process_.exchange(request, "step", step_reply_limit(chunks, layout_));
    read_step_reply(reply, chunks, layout_, outs);
  }

  void reset(int seq) override {
    read_done_reply(process_.exchange(reset_request(seq), "reset", kSmallReplyLimit), "reset");
  }

  // The runner calls these only when hello announced them; refused here otherwise too, so
  // that the engine never receives an op it did not ask for.
  void truncate(int seq, int64_t keep) override {
    if (!hello_.capabilities.truncate) Engine::truncate(seq, keep);
    read_done_reply(process_.exchange(truncate_request(seq, keep), "truncate", kSmallReplyLimit),
                    "truncate");
  }

  void fork(int src, int dst) override {
    if (!hello_.capabilities.fork) Engine::fork(src, dst);
    read_done_reply(process_.exchange(fork_request(src, dst), "fork", kSmallReplyLimit), "fork");
  }

 private:
  Layout layout_;
  LineProcess process_;
  HelloReply hello_;
};

// What hello is sent at resolve time: the configuration probe_declarations() makes its
// engine with (harness/src/run/engine.cpp): the default, smallest layout (one head of one
// dimension, f32), 4 sequences, pages in order. So the command is tried once on exactly
// what the probe will ask of it, and a hello that declares something malformed fails at
// --engine time. The engine must answer it with its declarations even when its supports
// exclude that layout: nothing is run on it (docs/engine-protocol.md).
EngineConfig smallest_config() {
  EngineConfig config;
  config.sequences = 4;
  config.page_order = {0, 1, 2, 3};
  return config;
}

}  // namespace

std::shared_ptr<const EngineInfo> exec_engine(const std::string& spec, const std::string& command) {
  const std::chrono::milliseconds timeout = engine_timeout(spec);
  std::string name;
  try {
    // Started once here so that a command that is missing, crashes on start-up or speaks
    // something else fails now, with the shell's or the engine's own words.
    const ExecEngine probe(command, smallest_config(), timeout);
    name = probe.name();
  } catch (const EngineError& e) {
    throw EngineSpecError("--engine " + spec + ": " + e.what());
  }
  auto info = std::make_shared<EngineInfo>();
  info->name = spec;
  info->description = "'" + name + "', a process speaking the engine protocol: " + command;
  info->mutant = false;
  info->make = [command, timeout](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<ExecEngine>(command, config, timeout);
  };
  return info;
}

}  // namespace kvfuzz::doors
