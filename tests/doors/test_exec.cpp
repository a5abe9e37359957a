// The exec: door (docs/engine-protocol.md): engines in other processes speaking JSON lines.
// The honest Python example passes generated scenarios and agrees with the contiguous
// engine; the buggy one is caught; every way an engine can break the protocol or the
// process contract becomes one engine_error naming the problem, within the timeout, with
// no process left behind; a command that cannot be an engine fails when it is resolved;
// and the kvfuzz command checks, shrinks and replays with a Python engine. Whatever an
// engine writes, its messages are valid UTF-8, so a finding is saved as a fixture.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "command.h"
#include "doors/exec_protocol.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"
#include "run/runner.h"
#include "spec_error.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kSource = KVFUZZ_SOURCE_DIR;

std::string quoted(const fs::path& path) {
  return "'" + path.string() + "'";
}

std::string python_script(const std::string& script, const std::string& args = "") {
  // -B: no __pycache__ in the source tree.
  return std::string(KVFUZZ_PYTHON) + " -B " + quoted(kSource / script) +
         (args.empty() ? "" : " " + args);
}

std::string honest_command() {
  return python_script("examples/python-engine/honest_engine.py");
}

std::string buggy_command() {
  return python_script("examples/python-engine/buggy_engine.py");
}

std::string misbehaving(const std::string& mode, const std::string& arg = "") {
  return python_script("tests/doors/exec/misbehaving_engine.py",
                       mode + (arg.empty() ? "" : " " + arg));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Every engine of these tests gets 20 s per request (a loaded CI machine can take seconds
// to start Python), unless a test needs a timeout to fire: it sets kHangTimeout then.
// Bounds on how long a test takes are far above what it needs, and below what waiting
// for a 20 s timeout would take where none should be waited for.
constexpr const char* kGenerousTimeout = "20";
constexpr const char* kHangTimeout = "3";
[[maybe_unused]] const bool kTimeoutSet = setenv("KVFUZZ_ENGINE_TIMEOUT", kGenerousTimeout, 1) == 0;

// True when `text` can be a fixture's provenance.failure: the fixture writer (a JSON
// library) refuses text that is not valid UTF-8, and the parser reads it back unchanged.
bool valid_utf8(const std::string& text) {
  Scenario fixture = test::worked_example();
  fixture.provenance.source = "check";
  fixture.provenance.failure = text;
  try {
    return parse_fixture(write_fixture(fixture), "valid_utf8").provenance.failure == text;
  } catch (const FixtureError&) {
    return false;
  }
}

// An environment variable for the scope of one test (each test is its own process under
// ctest; this keeps a test binary run as a whole correct too).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// KVFUZZ_ENGINE_TIMEOUT in seconds.
class ScopedTimeout : public ScopedEnv {
 public:
  explicit ScopedTimeout(const char* seconds) : ScopedEnv("KVFUZZ_ENGINE_TIMEOUT", seconds) {}
};

std::shared_ptr<const EngineInfo> exec_engine(const std::string& command) {
  return resolve_engine("exec:" + command);
}

CheckOutcome check(const Scenario& scenario, const EngineInfo& engine) {
  return judge_engine(scenario, prepare(scenario), engine);
}

// Request A (3 tokens), reset, request B (2 tokens): B's first row is at position 0.
Scenario reset_between_requests() {
  Scenario s = test::worked_example();
  s.name = "reset-between-requests";
  s.program = {Op::append(0, {0, 1, 2}), Op::reset(0), Op::append(0, {3, 4})};
  return s;
}

// True when this process has no child left, running or unreaped.
bool no_children_left() {
  return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

// A process that is gone, or a zombie waiting for a parent other than us.
bool process_gone(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0) return line.find('Z') != std::string::npos;
  }
  return true;
}

// The live processes whose command line holds `marker` (a zombie's command line is empty).
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::stringstream cmdline;
    cmdline << in.rdbuf();
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (cmdline.str().find(marker) != std::string::npos && !process_gone(pid)) {
      found.push_back(pid);
    }
  }
  return found;
}

// Waits up to `seconds` for `done`, polling.
template <class Done>
bool wait_for(double seconds, Done done) {
  const auto start = Clock::now();
  while (!done()) {
    if (seconds_since(start) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::unique_ptr<Engine> make_engine(const EngineInfo& engine, int sequences = 1) {
  EngineConfig config;
  config.sequences = sequences;
  config.page_order = {0, 1};
  return engine.make(config);
}

// One token of the default layout (one head of one dimension) on `seq`.
void step_one_token(Engine& engine, int seq) {
  static const std::vector<float> zero(1, 0.0f);
  std::vector<ChunkOut> out(1);
  const ChunkIn in{seq, 1, zero, zero, zero};
  engine.step(std::span<const ChunkIn>(&in, 1), out);
}

// ---------------------------------------------------------------------------------------
// The honest and the buggy example engines

TEST(ExecEngine, HelloGivesTheDescriptionAndCapabilities) {
  {
    const auto engine = exec_engine(honest_command());
    EXPECT_EQ(engine->name, "exec:" + honest_command());
    EXPECT_NE(engine->description.find("'honest-python'"), std::string::npos)
        << engine->description;
    EXPECT_NE(engine->description.find("version 2 (one process serves many cases)"),
              std::string::npos)
        << engine->description;
    EXPECT_FALSE(engine->mutant);
    const EngineCapabilities can = probe_capabilities(*engine);
    EXPECT_TRUE(can.truncate);
    EXPECT_TRUE(can.fork);
  }
  // The idle process of version 2 ends with the last owner of its EngineInfo.
  EXPECT_TRUE(no_children_left());
}

// Without KVFUZZ_ENGINE_TIMEOUT, hello (an engine's start-up: imports, a model) may take 60 s
// where a step may take 10: an engine that starts in 11 s is resolved and runs.
TEST(ExecEngine, AStartUpLongerThanAStepsLimitIsWaitedForByDefault) {
  const ScopedEnv unset("KVFUZZ_ENGINE_TIMEOUT", "");
  const auto engine = exec_engine("sleep 11; " + honest_command());
  const CheckOutcome outcome = check(test::worked_example(), *engine);
  EXPECT_TRUE(outcome.verdict.pass) << outcome.run.error.value_or("");
}

// Bitwise claims come through hello ("bitwise": {...}) and are judged bit for bit: the
// honest Python engine keeps all four; moving every batched value one float32 up passes
// the tolerance but not the claim.
TEST(ExecEngine, BitwiseClaimsInHelloAreJudgedBitForBit) {
  const auto claiming = exec_engine(misbehaving("claims-bitwise"));
  EngineConfig config;
  config.sequences = 4;
  config.page_order = {0, 1, 2, 3};
  EXPECT_EQ(claiming->make(config)->bitwise_claims(),
            (BitwiseClaims{.batch = true, .schedule = true, .layout = true, .poison = true}));
  EXPECT_EQ(exec_engine(honest_command())->make(config)->bitwise_claims(), BitwiseClaims{});
  const auto variant = exec_engine(misbehaving("batch-variant"));
  const auto claiming_variant = exec_engine(misbehaving("claims-bitwise-batch-variant"));
  GeneratorOptions options;
  options.max_sequences = 3;
  options.max_ops = 6;
  options.max_epoch_tokens = 16;
  options.typical_epoch_tokens = 12;
  options.max_head_dim = 4;
  options.typical_head_dim = 4;
  int broken = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    PrngChoiceSource choices(8100 + seed);
    const Scenario s = generate_scenario(choices, options);
    for (Property p : {Property::batch, Property::schedule, Property::layout, Property::poison}) {
      const PropertyOutcome out = judge_property(p, s, *claiming);
      EXPECT_TRUE(out.pass) << "seed " << 8100 + seed << ":\n" << out.report;
    }
    EXPECT_TRUE(judge_property(Property::batch, s, *variant).pass) << 8100 + seed;
    const PropertyOutcome out = judge_property(Property::batch, s, *claiming_variant);
    if (out.pass) continue;
    ++broken;
    EXPECT_NE(out.report.find("claims this invariance bit for bit"), std::string::npos)
        << out.report;
    EXPECT_NE(out.report.find(", 1 f32 ulp apart"), std::string::npos) << out.report;
  }
  EXPECT_GE(broken, 3);
}

// Numerics and supports come through hello ("numerics", "supports") and are read back
// field for field by the probe, whose layout (f32, head_dim 1) the declared supports
// exclude: an engine answers the probe's hello all the same. Absent fields keep the
// defaults; "p": "none" is no P dtype.
TEST(ExecEngine, NumericsAndSupportsInHelloAreReadBackExactly) {
  const EngineDeclarations all = probe_declarations(*exec_engine(misbehaving("declares-all")));
  EXPECT_EQ(all.numerics, (EngineNumerics{.output = DType::bf16,
                                          .p = DType::bf16,
                                          .score_accumulation = DType::f16,
                                          .value_accumulation = DType::f16,
                                          .rotated_keys_in_storage = true,
                                          .rotated_queries_in_storage = true,
                                          .rope_angles_exact = true,
                                          .exp_ulps = 1024}));
  EXPECT_EQ(all.supports, (EngineSupports{.dtypes = {DType::bf16, DType::f16},
                                          .head_dim_multiple = 8,
                                          .max_head_dim = 256,
                                          .max_q_heads = 64,
                                          .max_context = 4096,
                                          .value_dim_is_head_dim = true,
                                          .rope_required = true,
                                          .windows = false}));

  const EngineDeclarations some = probe_declarations(*exec_engine(misbehaving("declares-some")));
  EXPECT_EQ(some.numerics, (EngineNumerics{.rotated_keys_in_storage = false}));
  EXPECT_EQ(some.supports, (EngineSupports{.max_context = 100}));

  // Through the Python loop: declarations on the engine's class.
  const EngineDeclarations on_class =
      probe_declarations(*exec_engine(misbehaving("declares-on-class")));
  EXPECT_EQ(on_class.numerics,
            (EngineNumerics{.output = DType::f16, .score_accumulation = DType::f16}));
  EXPECT_EQ(on_class.supports, (EngineSupports{.dtypes = {DType::f16}, .max_q_heads = 4}));

  const EngineDeclarations none = probe_declarations(*exec_engine(honest_command()));
  EXPECT_EQ(none.numerics, EngineNumerics{});
  EXPECT_FALSE(none.numerics.rotated_keys_in_storage.has_value());
  EXPECT_EQ(none.supports, EngineSupports{});
  EXPECT_TRUE(no_children_left());
}

TEST(ExecEngine, HonestPythonEnginePassesGeneratedScenariosAndAgreesWithContiguous) {
  auto python = exec_engine(honest_command());
  const EngineInfo& contiguous = *find_engine("contiguous");
  GeneratorOptions options;
  options.max_sequences = 3;
  options.max_ops = 8;
  options.max_epoch_tokens = 24;
  options.typical_epoch_tokens = 16;
  options.max_head_dim = 8;
  options.typical_head_dim = 4;
  options.max_q_heads = 4;
  options.typical_q_heads = 4;
  std::map<std::string, int> seen;  // what the scenarios held, so that passing means something
  for (uint64_t seed = 0; seed < 40; ++seed) {
    PrngChoiceSource choices(7000 + seed);
    const Scenario scenario = generate_scenario(choices, options);
    const Prepared prepared = prepare(scenario);
    const CheckOutcome outcome = judge_engine(scenario, prepared, *python);
    ASSERT_TRUE(outcome.verdict.pass)
        << "seed " << 7000 + seed << ": " << outcome.verdict.first->detail
        << (outcome.run.error ? *outcome.run.error : "");
    const CheckOutcome reference_engine = judge_engine(scenario, prepared, contiguous);
    ASSERT_TRUE(reference_engine.verdict.pass);
    // The same rows at the same keys, within the reference's bound of each other.
    std::map<RowKey, const EngineRow*> rows;
    for (const EngineRow& row : reference_engine.run.rows) rows[row.key] = &row;
    ASSERT_EQ(outcome.run.rows.size(), rows.size());
    for (const EngineRow& row : outcome.run.rows) {
      ASSERT_TRUE(rows.count(row.key)) << to_string(row.key);
      const ReferenceRow& ref = prepared.reference.at(row.key);
      for (size_t i = 0; i < row.values.size(); ++i) {
        const double bound = 2 * ref.bound[i / static_cast<size_t>(scenario.layout.value_dim)];
        ASSERT_LE(std::abs(row.values[i] - rows[row.key]->values[i]), bound)
            << "seed " << 7000 + seed << ", " << to_string(row.key) << ", value " << i;
      }
    }
    for (const Op& op : scenario.program) {
      if (op.kind == OpKind::reset) ++seen["reset"];
      if (op.kind == OpKind::truncate) ++seen["truncate"];
      if (op.kind == OpKind::fork) ++seen["fork"];
      if (op.kind == OpKind::step && op.chunks.size() > 1) ++seen["batched step"];
    }
    if (scenario.layout.rope_theta) ++seen["rope"];
    if (scenario.layout.window) ++seen["window"];
    if (scenario.layout.group() > 1) ++seen["gqa"];
    if (scenario.layout.dtype != DType::f32) ++seen["half dtype"];
  }
  for (const char* what :
       {"reset", "truncate", "fork", "batched step", "rope", "window", "gqa", "half dtype"}) {
    EXPECT_GT(seen[what], 0) << "no scenario had a " << what;
  }
  python.reset();
  EXPECT_TRUE(no_children_left());
}

TEST(ExecEngine, EachEngineIsAProcessOfItsOwn) {
  const auto engine = exec_engine(honest_command());
  EngineConfig config;
  config.page_order = {0};
  const std::unique_ptr<Engine> a = engine->make(config);
  const std::unique_ptr<Engine> b = engine->make(config);
  const std::vector<float> zero(3, 0.0f), values{1, 2, 3};
  std::vector<ChunkOut> out(1);
  const ChunkIn three{0, 3, zero, zero, values};
  a->step(std::span<const ChunkIn>(&three, 1), out);
  EXPECT_EQ(out[0].positions, (std::vector<int64_t>{0, 1, 2}));
  const ChunkIn one{0, 1, std::span<const float>(zero).first(1),
                    std::span<const float>(zero).first(1), std::span<const float>(values).first(1)};
  b->step(std::span<const ChunkIn>(&one, 1), out);
  EXPECT_EQ(out[0].positions, (std::vector<int64_t>{0}));  // b never saw a's tokens
  a->step(std::span<const ChunkIn>(&one, 1), out);
  EXPECT_EQ(out[0].positions, (std::vector<int64_t>{3}));
  EXPECT_FLOAT_EQ(out[0].out[0], (1 + 2 + 3 + 1) / 4.0f);  // a's mean over its 4 values
}

TEST(ExecEngine, BuggyEngineIsCaughtByAWrongPositionAfterAReset) {
  const Scenario scenario = reset_between_requests();
  EXPECT_TRUE(check(scenario, *exec_engine(honest_command())).verdict.pass);
  const CheckOutcome buggy = check(scenario, *exec_engine(buggy_command()));
  ASSERT_FALSE(buggy.verdict.pass);
  EXPECT_EQ(buggy.verdict.first->kind, FailureKind::wrong_position);
  EXPECT_EQ(buggy.verdict.first->key, (RowKey{0, 1, 0}));  // B's first row, epoch 1
  EXPECT_EQ(buggy.run.rows.at(3).key.pos, 3);              // reported where A left off
}

TEST(ExecEngine, NonFiniteValuesAreFindingsNotProtocolErrors) {
  // Python's NaN and Infinity tokens, and JavaScript's null, are numbers to kvfuzz.
  for (const char* mode : {"nan", "infinity", "null"}) {
    const CheckOutcome outcome = check(test::worked_example(), *exec_engine(misbehaving(mode)));
    ASSERT_FALSE(outcome.verdict.pass) << mode;
    EXPECT_EQ(outcome.verdict.first->kind, FailureKind::not_finite) << mode;
    EXPECT_FALSE(outcome.run.error.has_value()) << mode << ": " << *outcome.run.error;
  }
}

// ---------------------------------------------------------------------------------------
// Misbehaving engines: one engine_error each, naming the problem, within the timeout

struct Misbehaviour {
  const char* mode;
  std::vector<std::string> message;  // each must appear in the engine error
  const char* timeout = kGenerousTimeout;
};

// The mode, where gtest would otherwise print the struct's bytes in the test's name.
void PrintTo(const Misbehaviour& m, std::ostream* out) {
  *out << m.mode;
}

class ExecMisbehaving : public testing::TestWithParam<Misbehaviour> {};

TEST_P(ExecMisbehaving, GivesAnEngineErrorNamingTheProblem) {
  const Misbehaviour& m = GetParam();
  const ScopedTimeout timeout(m.timeout);
  const auto engine = exec_engine(misbehaving(m.mode));
  const auto start = Clock::now();
  const CheckOutcome outcome = check(test::worked_example(), *engine);
  const double seconds = seconds_since(start);
  ASSERT_FALSE(outcome.verdict.pass);
  const Divergence& d = *outcome.verdict.first;
  EXPECT_EQ(d.kind, FailureKind::engine_error);
  EXPECT_EQ(d.detail.find('\n'), std::string::npos) << d.detail;
  EXPECT_TRUE(valid_utf8(d.detail)) << d.detail;
  for (const std::string& part : m.message) {
    EXPECT_NE(d.detail.find(part), std::string::npos) << "expected '" << part << "' in\n"
                                                      << d.detail;
  }
  // Within the timeout where one fires, well before it where none should be waited for.
  EXPECT_LT(seconds, std::atof(m.timeout) + 12.0) << d.detail;
  if (std::string_view(m.timeout) == kGenerousTimeout) {
    EXPECT_LT(seconds, 15.0) << d.detail;
  }
  EXPECT_TRUE(no_children_left());
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ExecMisbehaving,
    testing::Values(
        Misbehaviour{"garbage", {"answer to step is not JSON", "'this is not json'"}},
        Misbehaviour{"exit",
                     {"exited (status 3) before answering step",
                      "stderr ended: engine: out of memory, giving up"}},
        Misbehaviour{"hang",
                     {"did not answer step within 3 s (KVFUZZ_ENGINE_TIMEOUT); killed it"},
                     kHangTimeout},
        Misbehaviour{"traceback",
                     {"exited (status 1) before answering step", "ValueError: kaboom in step"}},
        Misbehaviour{"signal", {"killed by signal 11 (Segmentation fault)"}},
        Misbehaviour{"cut-short",
                     {"exited (status 0) before answering step",
                      "its stdout ended with '{\"ok\": true, \"chu'"}},
        Misbehaviour{"endless", {"answer to step ran past", "bytes without a newline", "'xxxx"}},
        Misbehaviour{"error", {"out of KV blocks (pool exhausted)"}},
        Misbehaviour{"rows",
                     {"$.chunks[0].out: expected an array of 3 rows (one per token), got an "
                      "array of 2"}},
        Misbehaviour{"positions-float",
                     {"$.chunks[0].positions[0]: expected an integer, got the number 0.0"}},
        Misbehaviour{"value-string",
                     {"$.chunks[0].out[0][0][0]: expected a number", "got the string '1.5'"}},
        Misbehaviour{"two-lines",
                     {"more than one line in answer to step", "{\"debug\": \"done\"}"}},
        // Bytes that are not UTF-8 are shown as \xNN; cuts fall between characters.
        Misbehaviour{"invalid-utf8",
                     {"answer to step is not JSON",
                      "'\\xff\\xfe \\xc3( \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80 x\u00e9x\u00e9"}},
        Misbehaviour{
            "stderr-multibyte",
            {"exited (status 3) before answering step", "its stderr ended: x\u20ac\u20ac\u20ac",
             "\u20ac... | split: \u20ac end | stray "
             "\\x80\\xff bytes \\xe2\\x82"}},
        Misbehaviour{"error-multibyte", {"x\u00e9\u00e9\u00e9", "\u00e9..."}}),
    [](const testing::TestParamInfo<Misbehaviour>& param) {
      std::string name = param.param.mode;
      for (char& c : name) c = c == '-' ? '_' : c;
      return name;
    });

TEST(ExecEngineProcess, WritingToAnEngineThatExitedIsAnErrorNotSigpipe) {
  const auto engine = exec_engine(misbehaving("exit-after-hello"));
  EngineConfig config;
  config.page_order = {0};
  const std::unique_ptr<Engine> instance = engine->make(config);
  // Long enough for it to be gone, so that the step's write meets a closed pipe (EPIPE);
  // a SIGPIPE would end this test binary.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::vector<float> zero(1, 0.0f);
  std::vector<ChunkOut> out(1);
  const ChunkIn in{0, 1, zero, zero, zero};
  try {
    instance->step(std::span<const ChunkIn>(&in, 1), out);
    FAIL() << "step succeeded";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("exited (status 4) before answering step"),
              std::string::npos)
        << e.what();
  }
  // Every later call repeats the failure instead of touching a dead process.
  EXPECT_THROW(instance->reset(0), EngineError);
}

TEST(ExecEngineProcess, StderrIsDrainedSoANoisyEnginePasses) {
  // Megabytes on stderr around every reply: the engine would block on a full pipe (and
  // time out) if kvfuzz did not read it.
  const CheckOutcome outcome =
      check(reset_between_requests(), *exec_engine(misbehaving("stderr-flood")));
  EXPECT_TRUE(outcome.verdict.pass) << (outcome.run.error ? *outcome.run.error : "");
}

TEST(ExecEngineProcess, AHungEngineIsKilledWithWhatItStarted) {
  const ScopedTimeout timeout(kHangTimeout);
  const fs::path pid_file =
      fs::temp_directory_path() / ("kvfuzz-exec-grandchild-" + std::to_string(getpid()));
  fs::remove(pid_file);
  const CheckOutcome outcome =
      check(test::worked_example(), *exec_engine(misbehaving("grandchild", quoted(pid_file))));
  ASSERT_FALSE(outcome.verdict.pass);
  EXPECT_NE(outcome.verdict.first->detail.find("did not answer step within 3 s"),
            std::string::npos);
  std::ifstream in(pid_file);
  pid_t grandchild = 0;
  ASSERT_TRUE(in >> grandchild) << "the engine did not start its child";
  EXPECT_TRUE(wait_for(10, [&] { return process_gone(grandchild); }))
      << "pid " << grandchild << " survived its engine";
  EXPECT_TRUE(no_children_left());
  fs::remove(pid_file);
}

TEST(ExecEngineProcess, AnEngineThatIgnoresEndOfInputIsKilledAfterTheGrace) {
  const auto engine = exec_engine(misbehaving("ignore-eof"));
  EngineConfig config;
  config.page_order = {0};
  std::unique_ptr<Engine> instance = engine->make(config);
  const auto start = Clock::now();
  instance.reset();
  const double seconds = seconds_since(start);
  EXPECT_GE(seconds, 0.9);
  EXPECT_LT(seconds, 12.0);
  EXPECT_TRUE(no_children_left());
}

// A child of this test plays kvfuzz: it makes an engine (which ignores end of input and has
// started a child of its own, both with `marker` on their command lines), then ends with
// _exit(), which runs no destructor, or is killed. Under dash the engine is not the
// shell's process but its child, so only the guard of the process group can end it.
void engines_die_with_kvfuzz(const std::string& marker, bool sigkill) {
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t kvfuzz = fork();
  ASSERT_GE(kvfuzz, 0);
  if (kvfuzz == 0) {
    close(ready[0]);
    close(go[1]);
    char byte = 'r';
    try {
      const auto engine = exec_engine(misbehaving("linger", marker));
      const std::unique_ptr<Engine> instance = make_engine(*engine);
      step_one_token(*instance, 0);
      if (write(ready[1], &byte, 1) != 1) _exit(3);
      [[maybe_unused]] const ssize_t ignored = read(go[0], &byte, 1);
      _exit(0);  // here, with the engine still made: no destructor may end it
    } catch (...) {
      _exit(2);
    }
  }
  close(ready[1]);
  close(go[0]);
  pollfd wait_ready{ready[0], POLLIN, 0};
  char byte = 0;
  const bool made = poll(&wait_ready, 1, 60'000) == 1 && read(ready[0], &byte, 1) == 1;
  const size_t running = processes_with(marker).size();
  if (sigkill || !made) {  // (not written to when it is gone: that would be a SIGPIPE)
    kill(kvfuzz, SIGKILL);
  } else {
    [[maybe_unused]] const ssize_t ignored = write(go[1], &byte, 1);
  }
  int status = 0;
  waitpid(kvfuzz, &status, 0);
  close(ready[0]);
  close(go[1]);
  ASSERT_TRUE(made) << "the engine was not made (status " << status << ")";
  EXPECT_GE(running, 2u) << "the engine and its child were not running";
  EXPECT_TRUE(wait_for(10, [&] { return processes_with(marker).empty(); }))
      << processes_with(marker).size() << " processes outlived the kvfuzz that started them";
  for (const pid_t left : processes_with(marker)) kill(left, SIGKILL);
}

TEST(ExecEngineProcess, TheEngineAndWhatItStartedDieWithKvfuzzWhenItExits) {
  engines_die_with_kvfuzz("kvfuzz-exec-marker-exit-" + std::to_string(getpid()), false);
}

TEST(ExecEngineProcess, TheEngineAndWhatItStartedDieWithKvfuzzWhenItIsKilled) {
  engines_die_with_kvfuzz("kvfuzz-exec-marker-sigkill-" + std::to_string(getpid()), true);
}

TEST(ExecEngineProcess, WithSigchldIgnoredEnginesStillWorkAndFailCleanly) {
  // Whoever starts kvfuzz may leave SIGCHLD ignored: the kernel then reaps every child as
  // it exits, so exit statuses are unknown and pids are no longer ours to signal.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGCHLD, &ignore, &previous), 0);
  const auto start = Clock::now();
  const CheckOutcome honest = check(reset_between_requests(), *exec_engine(honest_command()));
  const CheckOutcome exits = check(test::worked_example(), *exec_engine(misbehaving("exit")));
  const double seconds = seconds_since(start);
  sigaction(SIGCHLD, &previous, nullptr);
  EXPECT_TRUE(honest.verdict.pass) << (honest.run.error ? *honest.run.error : "");
  ASSERT_FALSE(exits.verdict.pass);
  // The status was the kernel's to take.
  EXPECT_NE(
      exits.verdict.first->detail.find(
          "the engine ended (its exit status was taken by someone else) before answering step"),
      std::string::npos)
      << exits.verdict.first->detail;
  EXPECT_NE(exits.verdict.first->detail.find("engine: out of memory, giving up"), std::string::npos)
      << exits.verdict.first->detail;
  EXPECT_LT(seconds, 15.0);
  EXPECT_TRUE(no_children_left());
}

TEST(ExecEngineProcess, ALineNobodyAskedForIsAnError) {
  // The engine writes its stray line when told to (FILE.go), after kvfuzz has its hello
  // reply, and says when it has (FILE.done): then the line waits in the pipe for the step.
  const fs::path file =
      fs::temp_directory_path() / ("kvfuzz-exec-unasked-" + std::to_string(getpid()));
  const fs::path go = file.string() + ".go", done = file.string() + ".done";
  fs::remove(go);
  fs::remove(done);
  const auto engine = exec_engine(misbehaving("unasked", quoted(file)));
  const std::unique_ptr<Engine> instance = make_engine(*engine);
  std::ofstream{go}.close();
  ASSERT_TRUE(wait_for(20, [&] { return fs::exists(done); }));
  try {
    step_one_token(*instance, 0);
    FAIL() << "step succeeded";
  } catch (const EngineError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "the engine wrote a line nobody asked for before step: '{\"debug\": \"unasked\"}'"),
        std::string::npos)
        << e.what();
  }
  fs::remove(go);
  fs::remove(done);
}

TEST(ExecEngineProcess, AnAnswerBeforeTheWholeRequestIsReadIsAnError) {
  // A request far larger than a pipe holds: the engine reads 100 bytes of it and answers.
  const auto engine = exec_engine(misbehaving("early-answer"));
  const std::unique_ptr<Engine> instance = make_engine(*engine);
  const int tokens = 100'000;
  const std::vector<float> values(tokens, 0.125f);
  std::vector<ChunkOut> out(1);
  const ChunkIn in{0, tokens, values, values, values};
  try {
    instance->step(std::span<const ChunkIn>(&in, 1), out);
    FAIL() << "step succeeded";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the engine answered step before reading all of it: '{\"ok\": true}'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(no_children_left());
}

TEST(ExecEngineProcess, ChunksOfTheWrongSizeAreRefusedBeforeAnythingIsSent) {
  const auto engine = exec_engine(honest_command());
  const std::unique_ptr<Engine> instance = make_engine(*engine);
  const std::vector<float> two(2, 0.0f), one(1, 0.0f);
  std::vector<ChunkOut> out(1);
  for (const ChunkIn& wrong : {ChunkIn{0, 3, one, one, one}, ChunkIn{0, 1, two, one, one},
                               ChunkIn{0, 1, one, one, two}, ChunkIn{0, -1, {}, {}, {}}}) {
    EXPECT_THROW(instance->step(std::span<const ChunkIn>(&wrong, 1), out), EngineError);
  }
  // Nothing reached the engine: its first token is still at position 0.
  const ChunkIn right{0, 1, one, one, one};
  instance->step(std::span<const ChunkIn>(&right, 1), out);
  EXPECT_EQ(out[0].positions, (std::vector<int64_t>{0}));
}

TEST(ExecEngineProcess, OperationsTheEngineDidNotAnnounceAreNeverSent) {
  // This engine answers truncate and fork with an error naming them: refusals that do not
  // name them are kvfuzz's own, made without asking the engine.
  const auto engine = exec_engine(misbehaving("no-optional-ops"));
  const EngineCapabilities can = probe_capabilities(*engine);
  EXPECT_FALSE(can.truncate);
  EXPECT_FALSE(can.fork);
  const std::unique_ptr<Engine> instance = make_engine(*engine, 2);
  step_one_token(*instance, 0);
  for (const auto& call : std::vector<std::function<void()>>{[&] { instance->truncate(0, 0); },
                                                             [&] { instance->fork(0, 1); }}) {
    try {
      call();
      FAIL() << "an operation the engine did not announce succeeded";
    } catch (const EngineError& e) {
      EXPECT_NE(std::string(e.what()).find("this engine does not support"), std::string::npos)
          << e.what();
      EXPECT_EQ(std::string(e.what()).find("which hello did not announce"), std::string::npos)
          << e.what();
    }
  }
  step_one_token(*instance, 0);  // the process is still there, and in step
}

// ---------------------------------------------------------------------------------------
// Resolve time: a command that cannot be an engine is an EngineSpecError, one line

struct SpecFailure {
  std::string command;
  std::vector<std::string> message;
  const char* timeout = kGenerousTimeout;
};

using test::spec_error;

TEST(ExecResolve, CommandsThatAreNoEngineFailWithOneLine) {
  const std::vector<SpecFailure> failures = {
      {"kvfuzz-no-such-engine-command",
       {"--engine exec:kvfuzz-no-such-engine-command: the engine exited (status 127) before "
        "answering hello",
        "kvfuzz-no-such-engine-command: not found"}},
      {"true", {"exited (status 0) before answering hello; nothing on its stderr"}},
      {"cat",
       {"answer to hello does not follow protocol 1: $.ok: expected true or false, got "
        "nothing (the field is missing)"}},
      {"echo hello", {"'hello'"}},  // "is not JSON", or "answered before reading it all"
      {"sleep 30", {"did not answer hello within 3 s"}, kHangTimeout},
      {misbehaving("protocol3"), {"the engine speaks protocol 3; this kvfuzz speaks 1 and 2"}},
      {misbehaving("no-name"), {"$.name: expected the engine's name, a non-empty string"}},
      {misbehaving("refuse-hello"), {"the engine refused hello: no GPU found"}},
      {misbehaving("capabilities-list"),
       {"$.capabilities: expected an object such as {\"truncate\": true, \"fork\": false}, got "
        "an array of 2"}},
      {misbehaving("capabilities-string"),
       {"$.capabilities.truncate: expected true or false, got the string 'yes'"}},
      {misbehaving("bitwise-string"),
       {"$.bitwise.batch: expected true or false, got the string 'yes'"}},
  };
  for (const SpecFailure& f : failures) {
    const ScopedTimeout timeout(f.timeout);
    const auto start = Clock::now();
    const std::string message = spec_error("exec:" + f.command);
    // Within the timeout where one fires, well before it where none should be waited for.
    EXPECT_LT(seconds_since(start), 15.0) << f.command;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("--engine exec:" + f.command + ": ", 0), 0u) << message;
    for (const std::string& part : f.message) {
      EXPECT_NE(message.find(part), std::string::npos) << "expected '" << part << "' in\n"
                                                       << message;
    }
  }
  EXPECT_TRUE(no_children_left());
}

// A malformed declaration fails at --engine time, with the JSON path of the field and what
// it should have been.
TEST(ExecResolve, MalformedDeclarationsFailWithOneLineNamingTheField) {
  const std::string dtypes = R"(one of "f32", "f16", "bf16")";
  const std::vector<SpecFailure> failures = {
      {misbehaving("numerics-list"),
       {R"($.numerics: expected an object such as {"output": "bf16"}, got an array of 1)"}},
      {misbehaving("numerics-bad-dtype"),
       {"$.numerics.output: expected " + dtypes + ", got the string 'fp8'"}},
      {misbehaving("numerics-output-number"),
       {"$.numerics.output: expected " + dtypes + ", got the number 3"}},
      {misbehaving("numerics-unknown-p"),
       {R"($.numerics.p: expected one of "none", "f16", "bf16", got the string 'f64')"}},
      {misbehaving("numerics-f32-p"),
       {R"($.numerics.p: expected one of "none", "f16", "bf16", got the string 'f32')"}},
      {misbehaving("numerics-bf16-accumulation"),
       {R"($.numerics.value_accumulation: expected one of "f32", "f16", got the string 'bf16')"}},
      {misbehaving("numerics-rotated-null"),
       {"$.numerics.rotated_keys_in_storage: expected true or false, got null"}},
      {misbehaving("numerics-exp-ulps-0"),
       {"$.numerics.exp_ulps: expected a positive integer, got the number 0"}},
      {misbehaving("numerics-misspelt"),
       {"$.numerics.ouptut: unknown field; expected one of output, p, score_accumulation, "
        "value_accumulation, rotated_keys_in_storage, rotated_queries_in_storage, "
        "rope_angles_exact"}},
      {misbehaving("supports-empty-dtypes"),
       {R"($.supports.dtypes: expected a non-empty array of storage dtypes such as ["f16", )"
        R"("bf16"], got an array of 0)"}},
      {misbehaving("supports-dtype-twice"),
       {R"($.supports.dtypes[2]: "f16" is listed twice; expected each dtype once)"}},
      {misbehaving("supports-head-dim-multiple-0"),
       {"$.supports.head_dim_multiple: expected a positive integer, got the number 0"}},
      {misbehaving("supports-negative-context"),
       {"$.supports.max_context: expected a positive integer, got the number -1"}},
      {misbehaving("supports-float-heads"),
       {"$.supports.max_q_heads: expected a positive integer, got the number 8.0"}},
  };
  for (const SpecFailure& f : failures) {
    const std::string message = spec_error("exec:" + f.command);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("--engine exec:" + f.command +
                                ": the engine's answer to hello does not follow protocol 1: ",
                            0),
              0u)
        << message;
    for (const std::string& part : f.message) {
      EXPECT_NE(message.find(part), std::string::npos) << "expected '" << part << "' in\n"
                                                       << message;
    }
  }
  EXPECT_TRUE(no_children_left());
}

TEST(ExecResolve, TheTimeoutMustBeAPositiveNumberOfSeconds) {
  for (const char* bad : {"abc", "0", "-1", "nan", "inf", "1e9", "2s"}) {
    const ScopedTimeout timeout(bad);
    const std::string message = spec_error("exec:" + honest_command());
    EXPECT_NE(message.find("KVFUZZ_ENGINE_TIMEOUT: expected a number of seconds in (0, 86400], "
                           "got '" +
                           std::string(bad) + "'"),
              std::string::npos)
        << message;
  }
  // Decimal seconds are honoured.
  const ScopedTimeout timeout("0.3");
  const auto start = Clock::now();
  EXPECT_NE(spec_error("exec:sleep 30").find("did not answer hello within 0.3 s"),
            std::string::npos);
  EXPECT_LT(seconds_since(start), 10.0);
}

// ---------------------------------------------------------------------------------------
// Protocol version 2: one process serves many cases

// The pids the engines of this scope logged at start-up (misbehaving_engine.py appends to
// KVFUZZ_TEST_PID_LOG), one per process started.
class PidLog {
 public:
  PidLog()
      : path_(fs::temp_directory_path() / ("kvfuzz-exec-pids-" + std::to_string(getpid()))),
        env_("KVFUZZ_TEST_PID_LOG", path_.string()) {
    fs::remove(path_);
  }
  ~PidLog() { fs::remove(path_); }
  PidLog(const PidLog&) = delete;
  PidLog& operator=(const PidLog&) = delete;

  std::vector<std::string> pids() const {
    std::vector<std::string> lines;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  fs::path path_;
  ScopedEnv env_;
};

GeneratorOptions small_options() {
  GeneratorOptions options;
  options.max_sequences = 2;
  options.max_ops = 6;
  options.max_epoch_tokens = 12;
  options.typical_epoch_tokens = 8;
  options.max_head_dim = 4;
  options.typical_head_dim = 4;
  options.max_q_heads = 4;
  options.typical_q_heads = 2;
  return options;
}

// One append of five tokens: a case of a single step.
Scenario one_step() {
  Scenario s = test::worked_example();
  s.name = "one-step";
  s.program = {Op::append(0, {0, 1, 2, 3, 4})};
  return s;
}

// Cases, and every property's variants, on the version 2 engine all run in the process its
// resolve started; forced to version 1 the same loop starts one process per engine, and
// so does an engine that speaks only version 1.
TEST(ExecPersistent, OneProcessServesEveryCaseAndVariantOfAVersion2Engine) {
  const auto run = [](int& engines_made, const std::string& mode = "v2-honest") {
    auto engine = exec_engine(misbehaving(mode));
    EngineInfo counting = *engine;
    counting.make = [&engines_made, make = engine->make](const EngineConfig& config) {
      ++engines_made;
      return make(config);
    };
    for (uint64_t seed = 0; seed < 6; ++seed) {
      PrngChoiceSource choices(9100 + seed);
      const Scenario s = generate_scenario(choices, small_options());
      EXPECT_TRUE(check(s, counting).verdict.pass) << 9100 + seed;
      for (Property p : {Property::schedule, Property::layout, Property::reset}) {
        EXPECT_TRUE(judge_property(p, s, counting).pass) << 9100 + seed;
      }
    }
    return engine->description;
  };
  {
    const PidLog log;
    int made = 0;
    const std::string description = run(made);
    EXPECT_NE(description.find("version 2"), std::string::npos) << description;
    EXPECT_GT(made, 12);
    EXPECT_EQ(log.pids().size(), 1u) << made << " engines";
  }
  {
    const PidLog log;
    const ScopedEnv protocol("KVFUZZ_EXEC_PROTOCOL", "1");
    int made = 0;
    const std::string description = run(made);
    EXPECT_NE(description.find("version 1:"), std::string::npos) << description;
    EXPECT_EQ(log.pids().size(), static_cast<size_t>(made) + 1);  // and the resolve's
  }
  {
    const PidLog log;
    int made = 0;
    const std::string description = run(made, "honest");
    EXPECT_NE(description.find("version 1:"), std::string::npos) << description;
    EXPECT_EQ(log.pids().size(), static_cast<size_t>(made) + 1);
  }
  EXPECT_TRUE(no_children_left());
}

// The example loop (kvfuzz.exec_server.serve) speaks both: version 2 when offered, version 1 to
// a kvfuzz that offers only 1 (its hello then is exactly version 1's).
TEST(ExecPersistent, ThePythonLoopSpeaksBothVersions) {
  EXPECT_EQ(doors::hello_request(EngineConfig{}, 1).find("protocols"), std::string::npos);
  EXPECT_NE(doors::hello_request(EngineConfig{}, 2).find(R"("protocol":1,"protocols":[1,2],)"),
            std::string::npos);
  for (const char* version : {"1", "2"}) {
    const ScopedEnv protocol("KVFUZZ_EXEC_PROTOCOL", version);
    const auto engine = exec_engine(honest_command());
    EXPECT_NE(engine->description.find("version " + std::string(version)), std::string::npos)
        << engine->description;
    EXPECT_TRUE(check(reset_between_requests(), *engine).verdict.pass) << version;
    EXPECT_FALSE(check(reset_between_requests(), *exec_engine(buggy_command())).verdict.pass);
  }
}

// A process whose case went wrong in any way is ended, never handed to the next case: each
// case of an engine whose steps fail starts a process of its own.
TEST(ExecPersistent, AProcessWithAnEngineErrorIsNotReused) {
  const PidLog log;
  const auto engine = exec_engine(misbehaving("v2-error"));
  for (int i = 0; i < 3; ++i) {
    const CheckOutcome outcome = check(test::worked_example(), *engine);
    ASSERT_TRUE(outcome.run.error);
    EXPECT_NE(outcome.run.error->find("out of KV blocks"), std::string::npos) << *outcome.run.error;
  }
  EXPECT_EQ(log.pids().size(), 3u);  // the resolve's process served the first case
}

// An engine that dies between cases (here just after each case's only step) is not handed
// out dead: the next case starts a new process and passes.
TEST(ExecPersistent, AProcessThatDiedBetweenCasesIsReplaced) {
  const PidLog log;
  const auto engine = exec_engine(misbehaving("v2-exit-after-step"));
  for (int i = 0; i < 3; ++i) {
    const CheckOutcome outcome = check(one_step(), *engine);
    EXPECT_TRUE(outcome.verdict.pass) << (outcome.run.error ? *outcome.run.error : "");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it exits meanwhile
  }
  EXPECT_EQ(log.pids().size(), 3u);
}

// A wrong answer to new_case is an engine error of that case in one line, and the process
// is ended: the next case gets a new process (whose hello is fine) and passes.
TEST(ExecPersistent, AWrongAnswerToNewCaseIsOneLineAndTheProcessIsNotReused) {
  const std::vector<std::pair<std::string, std::string>> modes = {
      {"refuse-new-case", "the engine refused new_case: cannot start another case"},
      {"new-case-changes-supports",
       "the engine's answer to new_case declares $.supports.max_context otherwise than its "
       "answer to hello; only numerics may depend on the case"},
      {"new-case-changes-capabilities",
       "the engine's answer to new_case declares $.capabilities.fork otherwise"},
      {"new-case-no-name",
       "the engine's answer to new_case does not follow protocol 2: $.name: expected the "
       "engine's name, a non-empty string"},
      {"new-case-protocol-1", "$.protocol: expected the integer 2, the version its hello chose"},
      {"exit-on-new-case",
       "the engine exited (status 5) before answering new_case; its stderr ended: engine: only "
       "one case per process"},
  };
  for (const auto& [mode, expected] : modes) {
    const PidLog log;
    const auto engine = exec_engine(misbehaving("v2-" + mode));
    const CheckOutcome failed = check(test::worked_example(), *engine);
    ASSERT_TRUE(failed.run.error) << mode;
    EXPECT_NE(failed.run.error->find(expected), std::string::npos) << *failed.run.error;
    EXPECT_EQ(failed.run.error->find('\n'), std::string::npos) << *failed.run.error;
    EXPECT_FALSE(failed.verdict.pass);
    const CheckOutcome next = check(test::worked_example(), *engine);
    EXPECT_TRUE(next.verdict.pass) << mode << ": " << (next.run.error ? *next.run.error : "");
    EXPECT_EQ(log.pids().size(), 2u) << mode;
  }
  EXPECT_TRUE(no_children_left());
}

// A pool inherited across fork() (check's workers) is the parent's: the child starts its
// own process and drops its copies of the parent's without ending them, and the parent's
// idle process serves the parent's next case. An engine made before fork() is refused in
// the child (its pipes are the parent's too) and keeps working in the parent.
TEST(ExecPersistent, AForkedChildNeitherUsesNorEndsTheParentsProcesses) {
  const PidLog log;
  const auto engine = exec_engine(misbehaving("v2-honest"));
  EngineConfig config;
  config.page_order = {0};
  const std::unique_ptr<Engine> live = engine->make(config);  // the resolve's process, in use
  ASSERT_TRUE(check(reset_between_requests(), *engine).verdict.pass);
  ASSERT_EQ(log.pids().size(), 2u);  // the check's, idle now
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // An engine made before fork() is refused in the child; one made after works.
    bool refused = false;
    try {
      live->reset(0);
    } catch (const EngineError& e) {
      refused = std::string(e.what()).find("make the engine after fork()") != std::string::npos;
    }
    const bool pass = check(reset_between_requests(), *engine).verdict.pass;
    _exit(refused && pass ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(log.pids().size(), 3u);  // the child's own
  live->reset(0);                    // the parent's engines still work
  EXPECT_TRUE(check(reset_between_requests(), *engine).verdict.pass);
  EXPECT_EQ(log.pids().size(), 3u);  // on the parent's idle process
}

TEST(ExecResolve, TheProtocolVersionMustBe1Or2) {
  for (const char* bad : {"0", "3", "two", " 2"}) {
    const ScopedEnv protocol("KVFUZZ_EXEC_PROTOCOL", bad);
    const std::string message = spec_error("exec:" + honest_command());
    EXPECT_NE(message.find("KVFUZZ_EXEC_PROTOCOL: expected 1 or 2, got '" + std::string(bad) + "'"),
              std::string::npos)
        << message;
  }
  // Forced to 1, an engine that answers 2 anyway is refused.
  const ScopedEnv protocol("KVFUZZ_EXEC_PROTOCOL", "1");
  const std::string message = spec_error("exec:" + misbehaving("protocol2"));
  EXPECT_NE(
      message.find("the engine speaks protocol 2; this kvfuzz speaks 1 (KVFUZZ_EXEC_PROTOCOL)"),
      std::string::npos)
      << message;
}

// ---------------------------------------------------------------------------------------
// The kvfuzz command with Python engines

using test::run_kvfuzz;

std::string engine_flag(const std::string& command) {
  return "--engine \"exec:" + command + "\"";
}

// Small scenarios: a pure-Python engine is slow on the generator's largest ones.
const std::string kSmall = " --max-tokens 24 --max-head-dim 8 --max-q-heads 4 --quiet";

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvfuzz-exec-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir;
}

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  return files;
}

TEST(ExecCli, CheckPassesTheHonestPythonEngine) {
  const fs::path out = fresh_dir("honest");
  const auto r = run_kvfuzz("check " + engine_flag(honest_command()) + " --cases 12" + kSmall +
                            " --out " + quoted(out));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("pass"), std::string::npos) << r.out;
  EXPECT_TRUE(json_files(out).empty());
  fs::remove_all(out);
}

// kvfuzz check starts a version-2 engine once for all its cases (the resolve's process
// serves them; where check runs its cases in a forked worker, once more there), and once
// per engine made when forced to version 1.
TEST(ExecCli, CheckStartsAVersion2EngineOnce) {
  const fs::path out = fresh_dir("persistent");
  const std::string command = "check " + engine_flag(misbehaving("v2-honest")) + " --cases 20" +
                              kSmall + " --out " + quoted(out);
  {
    const PidLog log;
    const auto r = run_kvfuzz(command);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_LE(log.pids().size(), 2u);
  }
  {
    const PidLog log;
    const ScopedEnv protocol("KVFUZZ_EXEC_PROTOCOL", "1");
    const auto r = run_kvfuzz(command);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_GT(log.pids().size(), 20u);  // one per case, and the probes
  }
  fs::remove_all(out);
}

TEST(ExecCli, CheckRejectsTheBuggyEngineAndShrinkGivesASmallFixtureThatReplays) {
  const fs::path out = fresh_dir("buggy");
  const auto r = run_kvfuzz("check " + engine_flag(buggy_command()) + " --cases 40" + kSmall +
                            " --out " + quoted(out));
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("wrong-position at seq"), std::string::npos) << r.out;
  const std::vector<fs::path> saved = json_files(out);
  ASSERT_EQ(saved.size(), 1u) << r.out;

  const fs::path shrunk_dir = out / "shrunk";
  const auto s = run_kvfuzz("shrink " + quoted(saved[0]) + " " + engine_flag(buggy_command()) +
                            " --time 300 --quiet --out " + quoted(shrunk_dir) + " --raw " +
                            quoted(out / "raw"));
  ASSERT_EQ(s.status, 1) << s.out << s.err;
  const std::vector<fs::path> shrunk = json_files(shrunk_dir);
  ASSERT_EQ(shrunk.size(), 1u) << s.out;
  const Scenario small = load_fixture(shrunk[0]);
  // A token, a reset, a token (and maybe one more): what the shrinker reaches when it
  // finishes, which a very slow machine might not within the budget (the note says so).
  if (small.note.find("stopped at the time budget") == std::string::npos) {
    EXPECT_LE(program_tokens(small), 3) << s.out;
  }
  EXPECT_NE(s.out.find("wrong-position"), std::string::npos) << s.out;

  const auto on_buggy =
      run_kvfuzz("replay " + quoted(shrunk[0]) + " " + engine_flag(buggy_command()));
  EXPECT_EQ(on_buggy.status, 1) << on_buggy.out << on_buggy.err;
  const auto on_contiguous = run_kvfuzz("replay " + quoted(shrunk[0]) + " --engine contiguous");
  EXPECT_EQ(on_contiguous.status, 0) << on_contiguous.out << on_contiguous.err;
  const auto on_honest =
      run_kvfuzz("replay " + quoted(shrunk[0]) + " " + engine_flag(honest_command()));
  EXPECT_EQ(on_honest.status, 0) << on_honest.out << on_honest.err;
  fs::remove_all(out);
}

TEST(ExecCli, AHangingEngineFailsTheCheckWithAFixtureInsteadOfHanging) {
  const fs::path out = fresh_dir("hang");
  const auto start = Clock::now();
  // One property: each property's runs wait out the timeout again (13 of them over all six,
  // 40 s), and what is tested here is the path from one timeout to one fixture.
  const auto r =
      test::run_shell("KVFUZZ_ENGINE_TIMEOUT=" + std::string(kHangTimeout) + " " +
                      std::string(KVFUZZ_BINARY) + " check " + engine_flag(misbehaving("hang")) +
                      " --cases 3 --property prefix" + kSmall + " --out " + quoted(out));
  EXPECT_LT(seconds_since(start), 30.0);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("did not answer step within 3 s"), std::string::npos) << r.out;
  EXPECT_EQ(json_files(out).size(), 1u) << r.out;
  fs::remove_all(out);
}

TEST(ExecCli, AnEngineWritingAnythingGivesAFindingWithAFixtureThatLoads) {
  // Bytes that are not UTF-8 on stdout, multi-byte characters around the cut of its
  // stderr, an error message longer than kvfuzz keeps: each goes into the fixture's
  // provenance.failure, which must be valid JSON.
  for (const char* mode : {"invalid-utf8", "stderr-multibyte", "error-multibyte"}) {
    const fs::path out = fresh_dir(std::string("text-") + mode);
    const auto r = run_kvfuzz("check " + engine_flag(misbehaving(mode)) + " --cases 1" + kSmall +
                              " --out " + quoted(out));
    EXPECT_EQ(r.status, 1) << mode << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("engine-error"), std::string::npos) << mode << "\n" << r.out;
    std::istringstream report(r.out);  // which quotes the engine's message
    for (std::string line; std::getline(report, line);) {
      EXPECT_TRUE(valid_utf8(line)) << mode << ": " << line;
    }
    const std::vector<fs::path> saved = json_files(out);
    ASSERT_EQ(saved.size(), 1u) << mode << "\n" << r.out << r.err;
    const Scenario fixture = load_fixture(saved[0]);
    ASSERT_TRUE(fixture.provenance.failure.has_value()) << mode;
    EXPECT_TRUE(valid_utf8(*fixture.provenance.failure)) << mode;
    EXPECT_EQ(fixture.provenance.failure->find('\n'), std::string::npos) << mode;
    fs::remove_all(out);
  }
}

TEST(ExecCli, AnEngineWithoutTruncateAndForkIsCheckedWithoutThemAndSkipsFixturesThatNeedThem) {
  const std::string engine = engine_flag(misbehaving("no-optional-ops"));
  const fs::path out = fresh_dir("no-optional-ops");
  // It answers truncate and fork with an error: a generated case with either would fail.
  const auto r = run_kvfuzz("check " + engine + " --cases 30" + kSmall + " --out " + quoted(out));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(json_files(out).empty());
  fs::remove_all(out);
  const fs::path fork_fixture = kSource / "corpus/seeds/fork-then-rollback.json";
  const auto replay = run_kvfuzz("replay " + quoted(fork_fixture) + " " + engine);
  EXPECT_EQ(replay.status, 0) << replay.out << replay.err;
  EXPECT_EQ(replay.out.rfind("skip ", 0), 0u) << replay.out;
  EXPECT_NE(replay.out.find("does not announce"), std::string::npos) << replay.out;
}

TEST(ExecCli, ACommandThatIsNoEngineIsBadInput) {
  const auto r = run_kvfuzz("check --engine exec:kvfuzz-no-such-engine-command --cases 1");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("not found"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvfuzz
