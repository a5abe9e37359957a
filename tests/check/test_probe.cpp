// probe_declarations_isolated (kvfuzz/check.h): an engine asked for its declarations in a
// child gives the same answer as asked in this process, every field of it; one that
// crashes, aborts, exits or hangs when made or asked is a ProbeCrash naming it and how it
// ended, and this process lives on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <thread>

#include "declarations_away.h"
#include "kvfuzz/check.h"
#include "kvfuzz/engine.h"

namespace {

using namespace kvfuzz;
using std::chrono::milliseconds;

// Declares something other than the default in every field (tests/declarations_away.h),
// so that a field lost on the way back from the child shows.
class Declaring final : public Engine {
 public:
  EngineCapabilities capabilities() const override { return away_.capabilities; }
  BitwiseClaims bitwise_claims() const override { return away_.bitwise; }
  EngineNumerics numerics() const override { return away_.numerics; }
  EngineSupports supports() const override { return away_.supports; }
  void step(std::span<const ChunkIn>, std::span<ChunkOut>) override {}
  void reset(int) override {}

 private:
  EngineDeclarations away_ = fieldwise::away_from_defaults<EngineDeclarations>();
};

// Whatever `declare` does happens when the engine is asked for its numerics.
class Misbehaving final : public Engine {
 public:
  explicit Misbehaving(void (*declare)()) : declare_(declare) {}
  EngineNumerics numerics() const override {
    declare_();
    return {};
  }
  void step(std::span<const ChunkIn>, std::span<ChunkOut>) override {}
  void reset(int) override {}

 private:
  void (*declare_)();
};

EngineInfo info_of(const std::string& name, EngineFactory make) {
  EngineInfo info;
  info.name = name;
  info.make = std::move(make);
  return info;
}

EngineInfo misbehaving(const std::string& name, void (*declare)()) {
  return info_of(name, [declare](const EngineConfig&) -> std::unique_ptr<Engine> {
    return std::make_unique<Misbehaving>(declare);
  });
}

void expect_same(const EngineDeclarations& a, const EngineDeclarations& b) {
  EXPECT_EQ(fieldwise::differing_fields(a, b), std::vector<std::string>{});
}

// The ProbeCrash thrown, or an empty one when nothing was thrown.
ProbeCrash crash_of(const EngineInfo& engine, milliseconds timeout = milliseconds(10'000)) {
  try {
    probe_declarations_isolated(engine, timeout);
  } catch (const ProbeCrash& e) {
    return e;
  }
  return ProbeCrash("", "", "");
}

TEST(Probe, EveryFieldComesBackFromTheChild) {
  const EngineInfo engine = info_of(
      "declaring",
      [](const EngineConfig&) -> std::unique_ptr<Engine> { return std::make_unique<Declaring>(); });
  const EngineDeclarations here = probe_declarations(engine);
  // Not vacuous: every field but whole_model (an attention engine's) away from its default.
  EXPECT_EQ(fieldwise::fields_at_default(here), std::vector<std::string>{"whole_model"});
  expect_same(probe_declarations_isolated(engine, milliseconds(10'000)), here);
}

TEST(Probe, BuiltInEnginesAnswerTheSameInAChild) {
  std::vector<EngineInfo> engines = engine_registry();
  for (const EngineInfo& engine : model_engine_registry()) engines.push_back(engine);
  for (const EngineInfo& engine : engines) {
    SCOPED_TRACE(engine.name);
    expect_same(probe_declarations_isolated(engine, milliseconds(10'000)),
                probe_declarations(engine));
  }
}

TEST(Probe, AnEngineThatCannotBeMadeIsAnEngineError) {
  const EngineInfo engine = info_of("refusing", [](const EngineConfig&) -> std::unique_ptr<Engine> {
    throw EngineError("no device");
  });
  try {
    probe_declarations_isolated(engine, milliseconds(10'000));
    FAIL() << "no EngineError";
  } catch (const ProbeCrash& e) {
    FAIL() << "a ProbeCrash: " << e.what();
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("engine refusing cannot be made for the smallest layout: "
                                         "no device"),
              std::string::npos)
        << e.what();
  }
}

TEST(Probe, ASegfaultWhenMadeIsAProbeCrash) {
  const EngineInfo engine = info_of("segv", [](const EngineConfig&) -> std::unique_ptr<Engine> {
    std::raise(SIGSEGV);
    return nullptr;
  });
  const ProbeCrash e = crash_of(engine);
  EXPECT_EQ(e.engine, "segv");
  EXPECT_EQ(e.signature, "crash/SIGSEGV");
  EXPECT_EQ(std::string(e.what()),
            "engine 'segv' died of SIGSEGV while it was made and asked for its declarations (in "
            "a child process)");
}

TEST(Probe, AnAbortInADeclarationIsAProbeCrash) {
  EXPECT_EQ(crash_of(misbehaving("abort", [] { std::abort(); })).signature, "crash/SIGABRT");
}

TEST(Probe, AnExitInADeclarationIsAProbeCrash) {
  const ProbeCrash e = crash_of(misbehaving("exit", [] { ::_exit(7); }));
  EXPECT_EQ(e.signature, "exit/7");
  EXPECT_NE(std::string(e.what()).find("engine 'exit' exited with status 7"), std::string::npos)
      << e.what();
}

TEST(Probe, AHangIsKilledAtTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const ProbeCrash e =
      crash_of(misbehaving("hang",
                           [] {
                             for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
                           }),
               milliseconds(300));
  EXPECT_EQ(e.signature, "timeout");
  EXPECT_NE(
      std::string(e.what()).find("was still being made or asked for its declarations after 0.3 s"),
      std::string::npos)
      << e.what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// An engine of its own process (exec:) is asked here: no child, whose process start would
// be paid twice.
TEST(Probe, AnOutOfProcessEngineIsAskedHere) {
  static int made = 0;
  made = 0;
  EngineInfo engine = info_of("exec-like", [](const EngineConfig&) -> std::unique_ptr<Engine> {
    ++made;
    return std::make_unique<Declaring>();
  });
  probe_declarations_isolated(engine, milliseconds(10'000));
  EXPECT_EQ(made, 0) << "in process engines are made in the child";
  engine.out_of_process = true;
  probe_declarations_isolated(engine, milliseconds(10'000));
  EXPECT_EQ(made, 1);
}

}  // namespace
