// exec:COMMAND: an engine in another process, any language, speaking JSON lines on its
// stdin and stdout (docs/engine-protocol.md): an attention engine, or a whole model when
// its hello says "whole_model": true. An engine of protocol version 1 is one
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
#include "doors/model_weights_file.h"

namespace kvfuzz::doors {

namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{10'000};
// hello and new_case when KVFUZZ_ENGINE_TIMEOUT is not set: an engine's start-up (importing
// torch and transformers, loading a model, making a case's model) takes seconds where a step
// takes milliseconds.
constexpr std::chrono::milliseconds kDefaultStartTimeout{60'000};
constexpr double kMostTimeoutSeconds = 86'400;

// KVFUZZ_ENGINE_TIMEOUT: seconds (a decimal number) that each request may take, hello
// (and so the engine's start-up) included; nothing when it is not set. Read once, when the
// engine is resolved.
std::optional<std::chrono::milliseconds> engine_timeout(const std::string& spec) {
  const char* text = std::getenv("KVFUZZ_ENGINE_TIMEOUT");
  if (text == nullptr || *text == '\0') return std::nullopt;
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
  std::chrono::milliseconds timeout;        // each request
  std::chrono::milliseconds start_timeout;  // hello and new_case
  int newest_protocol;
  ExecPool pool;
  // Requests its engines did not answer in time (EngineTimeout), over this kvfuzz process's
  // life: EngineInfo::hangs.
  std::atomic<int64_t> hangs{0};
  // Where a whole model's weights files go (doors/model_weights_file.h), removed with the
  // command.
  WeightsFolder weights;
};

// One case's process: taken from the command's pool (new_case) or started (hello), and
// given back when every exchange succeeded. What ExecEngine and ExecModelEngine share.
class ExecCase {
 public:
  ExecCase(std::shared_ptr<ExecCommand> command, const EngineConfig& config,
           const std::optional<ModelRequest>& model)
      : command_(std::move(command)) {
    counting_hangs([&] {
      if (std::optional<ExecSession> idle = command_->pool.take()) {
        session_ = std::move(*idle);
        // A failure here ends the process with this object's members: never reused. A whole
        // model's first case with its model declares anew (ExecSession::before_model).
        const bool first_model = model && session_.before_model;
        session_.hello = read_new_case_reply(
            session_.process->exchange(new_case_request(config, model), "new_case",
                                       kSmallReplyLimit, command_->start_timeout),
            session_.hello, !first_model);
        if (first_model) session_.before_model = false;
        return;
      }
      session_.process = std::make_unique<LineProcess>(command_->command, command_->timeout);
      session_.hello = read_hello_reply(
          session_.process->exchange(hello_request(config, command_->newest_protocol, model),
                                     "hello", kSmallReplyLimit, command_->start_timeout),
          command_->newest_protocol);
      session_.before_model = !model && session_.hello.whole_model;
    });
  }

  // A process of version 2 whose every exchange succeeded goes back to the pool (which
  // also checks that it is still alive); any other is ended here.
  ~ExecCase() {
    if (reusable_ && session_.hello.protocol >= kPersistentProtocol) {
      command_->pool.give(std::move(session_));
    }
  }
  ExecCase(const ExecCase&) = delete;
  ExecCase& operator=(const ExecCase&) = delete;

  const HelloReply& hello() const { return session_.hello; }

  // One request and its reply line. Any failure, the process's or its reply's (a refusal
  // included), leaves the process unfit for another case: it is ended, not given back.
  template <typename Read>
  void exchange(const std::string& request, const char* what, size_t limit, Read&& read) {
    try {
      counting_hangs([&] { read(session_.process->exchange(request, what, limit)); });
    } catch (...) {
      reusable_ = false;
      throw;
    }
  }

  // reset, truncate, fork: {"ok": true}.
  void done(const std::string& request, const char* what) {
    exchange(request, what, kSmallReplyLimit,
             [&](const std::string& reply) { read_done_reply(reply, what, hello().protocol); });
  }

 private:
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

  std::shared_ptr<ExecCommand> command_;
  ExecSession session_;
  bool reusable_ = true;
};

class ExecEngine final : public Engine {
 public:
  ExecEngine(std::shared_ptr<ExecCommand> command, const EngineConfig& config)
      : case_(std::move(command), config, std::nullopt), layout_(config.layout) {}

  const std::string& name() const { return case_.hello().name; }
  int protocol() const { return case_.hello().protocol; }
  bool whole_model() const { return case_.hello().whole_model; }
  EngineCapabilities capabilities() const override { return case_.hello().capabilities; }
  BitwiseClaims bitwise_claims() const override { return case_.hello().bitwise; }
  EngineNumerics numerics() const override { return case_.hello().numerics; }
  EngineSupports supports() const override { return case_.hello().supports; }

  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    if (outs.size() != chunks.size()) {
      throw EngineError("step: " + std::to_string(chunks.size()) + " chunks but " +
                        std::to_string(outs.size()) + " outputs");
    }
    // step_request() checks every span's size against the layout before it reads one.
    case_.exchange(step_request(chunks, layout_), "step", step_reply_limit(chunks, layout_),
                   [&](const std::string& reply) {
                     read_step_reply(reply, chunks, layout_, outs, protocol());
                   });
  }

  void reset(int seq) override { case_.done(reset_request(seq), "reset"); }

  // The runner calls these only when hello announced them; refused here otherwise too, so
  // that the engine never receives an op it did not ask for.
  void truncate(int seq, int64_t keep) override {
    if (!capabilities().truncate) Engine::truncate(seq, keep);
    case_.done(truncate_request(seq, keep), "truncate");
  }

  void fork(int src, int dst) override {
    if (!capabilities().fork) Engine::fork(src, dst);
    case_.done(fork_request(src, dst), "fork");
  }

 private:
  ExecCase case_;
  Layout layout_;
};

// A whole model through the exec door (docs/engine-protocol.md, "Whole models"): hello and
// new_case carry the model and its weights file, step carries ids and returns logits.
class ExecModelEngine final : public ModelEngine {
 public:
  ExecModelEngine(const std::shared_ptr<ExecCommand>& command, const ModelEngineConfig& config)
      : case_(command, config.engine,
              ModelRequest{config.model, ModelWeightsFile(command->weights.path(), config.model,
                                                          config.engine.layout)
                                             .path()
                                             .string()}),
        vocab_(static_cast<size_t>(std::max(0, config.model.vocab))) {
    // The weights file lived until the full expression above ended: the engine has read it
    // while answering hello or new_case.
    if (!case_.hello().whole_model) {
      throw EngineError("the engine's answer to hello no longer says \"whole_model\": true");
    }
  }

  EngineCapabilities capabilities() const override { return case_.hello().capabilities; }
  EngineNumerics numerics() const override { return case_.hello().numerics; }
  EngineSupports supports() const override { return case_.hello().supports; }

  void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) override {
    if (outs.size() != chunks.size()) {
      throw EngineError("step: " + std::to_string(chunks.size()) + " chunks but " +
                        std::to_string(outs.size()) + " outputs");
    }
    case_.exchange(model_step_request(chunks), "step", model_step_reply_limit(chunks, vocab_),
                   [&](const std::string& reply) {
                     read_model_step_reply(reply, chunks, vocab_, outs, case_.hello().protocol);
                   });
  }

  void reset(int seq) override { case_.done(reset_request(seq), "reset"); }
  void truncate(int seq, int64_t keep) override {
    if (!capabilities().truncate) ModelEngine::truncate(seq, keep);
    case_.done(truncate_request(seq, keep), "truncate");
  }
  void fork(int src, int dst) override {
    if (!capabilities().fork) ModelEngine::fork(src, dst);
    case_.done(fork_request(src, dst), "fork");
  }

 private:
  ExecCase case_;
  size_t vocab_;
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
  const std::optional<std::chrono::milliseconds> timeout = engine_timeout(spec);
  shared->timeout = timeout.value_or(kDefaultTimeout);
  shared->start_timeout = timeout.value_or(kDefaultStartTimeout);
  shared->newest_protocol = newest_protocol(spec);
  std::string name;
  int protocol = kOldestProtocol;
  bool whole_model = false;
  try {
    // Started once here so that a command that is missing, crashes on start-up or speaks
    // something else fails now, with the shell's or the engine's own words. A process of
    // version 2 stays in the pool for the first engine made.
    const ExecEngine probe(shared, smallest_config());
    name = probe.name();
    protocol = probe.protocol();
    whole_model = probe.whole_model();
  } catch (const EngineError& e) {
    throw EngineSpecError("--engine " + spec + ": " + e.what());
  }
  auto info = std::make_shared<EngineInfo>();
  info->name = spec;
  info->description =
      "'" + name + "', a process speaking the engine protocol" +
      (whole_model ? " (a whole model)" : "") + ", version " + std::to_string(protocol) +
      (protocol >= kPersistentProtocol ? " (one process serves many cases)" : "") + ": " + command;
  info->mutant = false;
  info->out_of_process = true;
  // The pool lives as long as the EngineInfo and the engines made from it.
  if (whole_model) {
    info->make_model = [shared](const ModelEngineConfig& config) -> std::unique_ptr<ModelEngine> {
      return std::make_unique<ExecModelEngine>(shared, config);
    };
  } else {
    info->make = [shared](const EngineConfig& config) -> std::unique_ptr<Engine> {
      return std::make_unique<ExecEngine>(shared, config);
    };
  }
  info->hangs = [shared] { return shared->hangs.load(); };
  return info;
}

}  // namespace kvfuzz::doors
