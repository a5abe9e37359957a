// The orchestration stage: what every door (the kvfuzz command, the Python package, the
// engine tests, the fuzz targets and the property suites) does between an engine's
// declarations and the judge, written once so that the doors are wiring and printing.
//
//   declarations -> generator_options_from_declarations -> generate -> judge
//   fixture -> replay_fixture (the fixture's expect rows, declarations, properties)
#pragma once

#include <chrono>
#include <span>
#include <stdexcept>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"

namespace kvfuzz {

// One engine's declarations (probe_declarations) with the name messages use.
struct NamedDeclarations {
  std::string name;
  EngineDeclarations declared;
};

// What a door narrows beyond the declarations (0: the generator's own limit).
struct SizeCaps {
  // Above the generator's maximum epoch size: the long-context mode (LongContextOptions),
  // whose contexts reach this many tokens.
  int max_tokens = 0;
  int max_head_dim = 0;
  int max_q_heads = 0;
  int max_sequences = 0;
  int max_ops = 0;
  // Judge every engine at model level (`--model`). Engines that all run whole models get
  // model scenarios without it.
  bool model = false;
};

// The declarations admit no scenario (no storage dtype, a head_dim multiple above every
// drawable head_dim) or the engines cannot share one (whole-model engines beside attention
// engines without `model`). The message is one line that names the engines or the cap; a
// door prefixes its flag or argument.
class DeclarationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What every engine supports. When the engines share no storage dtype (flash-bf16 beside
// flash-f16), the union of their dtypes instead: each engine then skips the cases outside
// its own supports (unjudgeable).
EngineSupports common_supports(std::span<const NamedDeclarations> engines);

// The generator's options for a run whose every case serves all `engines`: only the
// optional operations all of them announce, within what all of them support, model
// scenarios where they run whole models (or caps.model), sizes within `caps`. `base`
// carries what the door chose itself (engine edges, filters are applied after). Throws
// DeclarationError.
GeneratorOptions generator_options_from_declarations(std::span<const NamedDeclarations> engines,
                                                     const SizeCaps& caps = {},
                                                     GeneratorOptions base = {});

// How one fixture fares on one engine.
struct FixtureReplay {
  enum class Status {
    pass,
    wrong_expect,  // the reference disagrees with the fixture's own expect rows
    skipped,       // the fixture lies outside the engine's declarations (unjudgeable)
    fail,          // a property fails
    crashed,       // the engine crashed, exited or hung in its child (Isolation)
  };
  Status status = Status::pass;
  // wrong_expect: the first disagreement; skipped: why, as a phrase to follow "the fixture"
  // ("lies outside its supports: storage dtype f32 (supports bf16)"); fail: the report;
  // crashed: how the child ended, with its last stderr (describe_end).
  std::string detail;
  std::string crash_signature;  // crashed: "crash/SIGSEGV", "exit/1", "asan/...", "timeout"
  Property property = Property::prefix;  // fail: the property that failed
  PropertyOutcome outcome;               // fail: its outcome; pass: prefix's (row counts)
};

// Replays a fixture on an engine, its checks in one order for every door: the fixture's
// own expect rows against the reference (a wrong fixture, whatever the engine does); the
// engine's declarations; prefix; then the property a regression was shrunk under
// (recorded in its provenance). `prepared` is prepare(scenario).
FixtureReplay replay_fixture(const Scenario& scenario, const Prepared& prepared,
                             const EngineInfo& engine, const EngineDeclarations& declared);

// Where a command's engine calls run: in a forked child, so that a crash, an abort, a
// sanitizer's exit or a hang of the engine is a line about that engine and the command goes
// on, or here (`fork` false: --no-fork, for a debugger). An engine that computes out of
// process (exec:) is called from here either way: its process is its isolation, and its
// own request timeout (KVFUZZ_ENGINE_TIMEOUT) turns a hang into an engine error.
struct Isolation {
  bool fork = true;
  std::chrono::milliseconds timeout{600'000};
};

// Whether `engine`'s calls go to a child under `isolation`.
bool forks_for(const EngineInfo& engine, const Isolation& isolation);

// The same under `isolation`: a child that ends without an answer is Status::crashed.
FixtureReplay replay_fixture(const Scenario& scenario, const Prepared& prepared,
                             const EngineInfo& engine, const EngineDeclarations& declared,
                             const Isolation& isolation);

// judge_property under `isolation`. A child that ends without an answer gives a failing
// outcome without a signature (so a shrink never takes it for the failure it keeps), whose
// report is one line (describe_end) and whose end is put in `*ended` when given.
PropertyOutcome judge_property(Property property, const Scenario& scenario,
                               const EngineInfo& engine, const Isolation& isolation,
                               std::string* ended = nullptr);

}  // namespace kvfuzz
