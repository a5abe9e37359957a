// exec:COMMAND: an engine in another process, any language, speaking JSON lines on its
// stdin and stdout (docs/engine-protocol.md). An engine of protocol version 1 is one
// process per Engine made (a fresh engine per case, per property variant, per shrink
// candidate), so its start-up is part of what each costs. One of version 2 serves many:
// an Engine that ends cleanly gives its process back to the command's pool
// (doors/exec_pool.h) and the next one starts its case there with new_case. No state may
// leak across new_case; KVFUZZ_EXEC_PROTOCOL=1 makes every engine a process of its own
// again (docs/BENCHMARKS.md, "Engine protocol").
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "doors/exec_pool.h"
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

// KVFUZZ_EXEC_PROTOCOL: the newest version hello offers, 1 or 2 (default 2). 1 makes
// every engine a process of its own, as before version 2 (to measure what the pool saves,
// or to rule out an engine that leaks state across new_case). Read when resolved.
int newest_protocol(const std::string& spec) {
  const char* text = std::getenv("KVFUZZ_EXEC_PROTOCOL");
  if (text == nullptr || *text == '\0') return kNewestProtocol;
  for (int v = kOldestProtocol; v <= kNewestProtocol; ++v) {
    if (std::string(text) == std::to_string(v)) return v;
  }
  throw EngineSpecError("--engine " + spec + ": KVFUZZ_EXEC_PROTOCOL: expected " +
                        std::to_string(kOldestProtocol) + " or " + std::to_string(kNewestProtocol) +
                        ", got '" + std::string(text) + "'");
}

// What every engine of one resolved exec: spec shares: how to start a process, and the
// idle processes of version 2.
struct ExecCommand {
  std::string command;
  std::chrono::milliseconds timeout;
  int newest_protocol;
  ExecPool pool;
  // Requests its engines did not answer in time (EngineTimeout), over this kvfuzz process's
  // life: EngineInfo::hangs.
  std::atomic<int64_t> hangs{0};
};

class ExecEngine final : public Engine {
 public:
  // A process of the pool when there is one (new_case), else a new one (hello).
  ExecEngine(std::shared_ptr<ExecCommand> command, const EngineConfig& config)
      : command_(std::move(command)), layout_(config.layout) {
    counting_hangs([&] {
      if (std::optional<ExecSession> idle = command_->pool.take()) {
        session_ = std::move(*idle);
        // A failure here ends the process with this object's members: never reused.
        session_.hello = read_new_case_reply(
            session_.process->exchange(new_case_request(config), "new_case", kSmallReplyLimit),
            session_.hello);
        return;
      }
      session_.process = std::make_unique<LineProcess>(command_->command, command_->timeout);
      session_.hello = read_hello_reply(
          session_.process->exchange(hello_request(config, command_->newest_protocol), "hello",
                                     kSmallReplyLimit),
          command_->newest_protocol);
    });
  }

  // A process of version 2 whose every exchange succeeded goes back to the pool (which
  // also checks that it is still alive); any other is ended here.
  ~ExecEngine() override {
    if (reusable_ && session_.hello.protocol >= kPersistentProtocol) {
      command_->pool.give(std::move(session_));
    }
  }
  ExecEngine(const ExecEngine&) = delete;
  ExecEngine& operator=(const ExecEngine&) = delete;

  const std::string& name() const { return session_.hello.name; }
  int protocol() const { return session_.hello.protocol; }
  EngineCapabilities capabilities() const override { return session_.hello.capabilities; }
  BitwiseClaims bitwise_claims() const override { return session_.hello.bitwise; }
  EngineNumerics numerics() const override { return session_.hello.numerics; }
  EngineSupports supports() const override { return session_.hello.supports; }

  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    if (outs.size() != chunks.size()) {
      throw EngineError("step: " + std::to_string(chunks.size()) + " chunks but " +
                        std::to_string(outs.size()) + " outputs");
    }
    guarded([&] {
      // step_request() checks every span's size against the layout before it reads one.
      const std::string request = step_request(chunks, layout_);
      const std::string reply =
          process().exchange(request, "step", step_reply_limit(chunks, layout_));
      read_step_reply(reply, chunks, layout_, outs, protocol());
    });
  }

  void reset(int seq) override { done(reset_request(seq), "reset"); }

  // The runner calls these only when hello announced them; refused here otherwise too, so
  // that the engine never receives an op it did not ask for.
  void truncate(int seq, int64_t keep) override {
    if (!capabilities().truncate) Engine::truncate(seq, keep);
    done(truncate_request(seq, keep), "truncate");
  }

  void fork(int src, int dst) override {
    if (!capabilities().fork) Engine::fork(src, dst);
    done(fork_request(src, dst), "fork");
  }

 private:
  LineProcess& process() { return *session_.process; }

  // Runs one request. Any failure, the process's or its reply's (a refusal included),
  // leaves the process unfit for another case: it is ended, not given back.
  template <typename Body>
  void guarded(Body&& body) {
    try {
      counting_hangs(body);
    } catch (...) {
      reusable_ = false;
      throw;
    }
  }

  // Runs `body`, counting a request it timed out on in the command's hangs.
  template <typename Body>
  void counting_hangs(Body&& body) {
    try {
      body();
    } catch (const EngineTimeout&) {
      ++command_->hangs;
      throw;
    }
  }

  // reset, truncate, fork: {"ok": true}.
  void done(const std::string& request, const char* what) {
    guarded([&] {
      read_done_reply(process().exchange(request, what, kSmallReplyLimit), what, protocol());
    });
  }

  std::shared_ptr<ExecCommand> command_;
  Layout layout_;
  ExecSession session_;
  bool reusable_ = true;
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
  auto shared = std::make_shared<ExecCommand>();
  shared->command = command;
  shared->timeout = engine_timeout(spec);
  shared->newest_protocol = newest_protocol(spec);
  std::string name;
  int protocol = kOldestProtocol;
  try {
    // Started once here so that a command that is missing, crashes on start-up or speaks
    // something else fails now, with the shell's or the engine's own words. A process of
    // version 2 stays in the pool for the first engine made.
    const ExecEngine probe(shared, smallest_config());
    name = probe.name();
    protocol = probe.protocol();
  } catch (const EngineError& e) {
    throw EngineSpecError("--engine " + spec + ": " + e.what());
  }
  auto info = std::make_shared<EngineInfo>();
  info->name = spec;
  info->description = "'" + name + "', a process speaking the engine protocol, version " +
                      std::to_string(protocol) +
                      (protocol >= kPersistentProtocol ? " (one process serves many cases)" : "") +
                      ": " + command;
  info->mutant = false;
  info->out_of_process = true;
  // The pool lives as long as the EngineInfo and the engines made from it.
  info->make = [shared](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<ExecEngine>(shared, config);
  };
  info->hangs = [shared] { return shared->hangs.load(); };
  return info;
}

}  // namespace kvfuzz::doors
