// The orchestration stage: what every door (the kvfuzz command, the Python package, the
// engine tests, the fuzz targets and the property suites) does between an engine's
// declarations and the judge, written once so that the doors are wiring and printing.
//
//   declarations -> generator_options_from_declarations -> generate -> CaseJudge
//   fixture -> replay_fixture (the fixture's expect rows, declarations, properties)
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

// How one case fares on one engine: the outcome of each property asked, in order, for
// attention and model scenarios alike.
struct CaseVerdict {
  // The case lies outside the engine's declarations (unjudgeable): why. No property ran.
  std::optional<std::string> skipped;
  std::vector<std::pair<Property, PropertyOutcome>> outcomes;
  // prefix's rows: compared with the reference (a model scenario's logits rows), and of
  // them only checked for finiteness. 0 when prefix was not asked.
  int rows_compared = 0;
  int rows_unjudged = 0;
  double bound_used = 0;  // prefix's largest share of the bound (Verdict::bound_used)
  // The engine threw past the properties (they turn an engine's errors within a run into
  // engine_error divergences; what escapes is a failure outside one, e.g. to create the
  // engine): its message, and the property being judged.
  std::optional<std::string> engine_error;
  std::optional<Property> error_while;
  // The engine hung while this property was judged (EngineInfo::hangs grew): its outcome is
  // the last one, and the properties after it were not judged.
  std::optional<Property> hung_while;

  // The outcome of `property`, for the doors that judge one: as judged, or, when the engine
  // threw past the properties or hung before `property` was reached, a failing engine_error
  // outcome that says so. (A skipped verdict has none: a door asks `skipped` first.)
  PropertyOutcome outcome(Property property) const;
};

// " while judging schedule", or "" without a property: what a failure's line adds.
std::string while_judging(const std::optional<Property>& property);

// One case, judged on one engine or several: it holds the scenario and its reference
// prepared once per declared numerics, so that the engines of the case share the
// reference's work. Every door judges a case through it (kvfuzz check's tasks, the Python
// check, the engine tests, the fuzz targets, the property suites).
class CaseJudge {
 public:
  explicit CaseJudge(Scenario scenario) : scenario_(std::move(scenario)) {}
  const Scenario& scenario() const { return scenario_; }
  // The scenario's reference under `numerics`, prepared on first use.
  const Prepared& prepared(const EngineNumerics& numerics);

  // Judges `properties` in order on `engine`, unless the case lies outside `declared`; stops
  // after the first property during which the engine hung (CaseVerdict::hung_while).
  // `before` is told each property before it is judged, with the verdict so far (check's
  // workers send both to kvfuzz, so that a crash in the middle keeps what was reached).
  CaseVerdict judge(std::span<const Property> properties, const EngineInfo& engine,
                    const EngineDeclarations& declared,
                    const std::function<void(Property, const CaseVerdict&)>& before = {});

 private:
  Scenario scenario_;
  std::deque<Prepared> prepared_;  // (a deque: references stay valid as it grows)
};

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

// One engine's part of `kvfuzz explain` (and Python's kvfuzz.explain), for every door alike:
// for prefix, an attention scenario's every row (key, visible keys, expected and got, the
// bound for `numerics`) or a model scenario's logits verdict, first diverging logits row and
// first wrong layer; for an invariance, the engine against itself on the property's variants
// with the first row a variant changes. `text` begins "engine NAME (honest|mutant): pass" or
// "...: FAIL". `prepared` is prepare(scenario).
struct EngineExplanation {
  bool pass = true;
  std::string text;
};
EngineExplanation explain_engine(const Scenario& scenario, const Prepared& prepared,
                                 const EngineInfo& engine, const EngineNumerics& numerics,
                                 Property property);

}  // namespace kvfuzz
