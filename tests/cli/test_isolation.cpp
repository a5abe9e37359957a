// Every command that runs engines survives a crashing engine (issue 23): replay, explain and
// shrink run each engine call in a forked child (kvfuzz/orchestrate.h, Isolation), so a
// segfaulting plugin is a line about that engine and the command goes on; a hanging exec
// engine is cut by its request timeout (KVFUZZ_ENGINE_TIMEOUT); an engine that crashes or
// hangs while it is made is one line and status 3 (list too). `check` has its own tests
// (test_check_ci.cpp). Each test would end kvfuzz with the engine under --no-fork (shown
// once, for shrink, where the crash comes from a candidate rather than the input).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "command.h"
#include "kvfuzz/fixture_io.h"

namespace {

namespace fs = std::filesystem;
using Result = kvfuzz::test::CommandResult;
using kvfuzz::test::run_kvfuzz;
using kvfuzz::test::run_shell;

const fs::path kSource = KVFUZZ_SOURCE_DIR;

std::string seed(const char* name) {
  return (kSource / "corpus/seeds" / name).string();
}

std::string crashing(const std::string& name) {
  return "plugin:" + std::string(KVFUZZ_PLUGIN_CRASHING) + ":" + name;
}

// Stops answering on its first step; its requests time out after 1 s.
const std::string kHanging =
    "'exec:python3 " + (kSource / "tests/doors/exec/hang_on_step.py").string() + " 1'";
Result with_request_timeout(const std::string& args) {
  return run_shell("KVFUZZ_ENGINE_TIMEOUT=1 " + std::string(KVFUZZ_BINARY) + " " + args);
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvfuzz-isolation-" + name);
  fs::remove_all(dir);
  return dir;
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> found;
  if (!fs::exists(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") found.push_back(entry.path());
  }
  return found;
}

TEST(Isolation, ReplayGoesOnPastASegfaultingPlugin) {
  const Result r =
      run_kvfuzz("replay " + seed("worked-example.json") + " " + seed("gqa-group-three.json") +
                 " --engine paged," + crashing("segfault"));
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(count_of(r.out,
                     "crash/SIGSEGV: the engine died of SIGSEGV while it replayed the "
                     "fixture (in a child process)"),
            2)
      << r.out;
  EXPECT_NE(r.out.find("2 fixtures, 0 passed, 2 failed, 0 bad"), std::string::npos) << r.out;
}

TEST(Isolation, ReplayGoesOnPastAHangingExecEngine) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = with_request_timeout("replay " + seed("worked-example.json") + " " +
                                        seed("gqa-group-three.json") + " --engine " + kHanging);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(count_of(r.out, "did not answer step within 1 s"), 2) << r.out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
}

TEST(Isolation, AnEngineThatHangsWhenMadeIsOneLineAndStatus3ForEveryCommand) {
  const fs::path out = scratch("hang-in-create");
  for (const std::string& args :
       {"list --engine " + crashing("hang-in-create"),
        "replay " + seed("worked-example.json") + " --engine " + crashing("hang-in-create"),
        "explain " + seed("worked-example.json") + " --engine " + crashing("hang-in-create"),
        "shrink " + seed("worked-example.json") + " --out " + out.string() + " --engine " +
            crashing("hang-in-create")}) {
    const Result r = run_kvfuzz(args + " --timeout 1");
    EXPECT_EQ(r.status, 3) << args << "\n" << r.out << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1) << r.err;
    EXPECT_NE(r.err.find("was still being made or asked for its declarations after 1 s"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("the command cannot start"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(Isolation, ListOfAnEngineThatSegfaultsWhenMadeIsOneLineAndStatus3) {
  const Result r = run_kvfuzz("list --engine paged," + crashing("segfault-in-create"));
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_EQ(count_of(r.err, "\n"), 1) << r.err;
  EXPECT_NE(r.err.find("kvfuzz: list: engine '" + crashing("segfault-in-create") +
                       "' died of SIGSEGV while it was made"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("engine        paged (honest)"), std::string::npos) << r.out;
}

TEST(Isolation, ExplainExplainsTheOtherEnginesPastAnAbortingPlugin) {
  const Result r = run_kvfuzz("explain " + seed("worked-example.json") + " --engine " +
                              crashing("abort") + ",paged");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL: crash/SIGABRT: the engine died of SIGABRT while it ran the "
                       "fixture (in a child process); its last stderr:\ncrashing_engines: "
                       "assertion 'block < pool' failed"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("engine paged (honest): pass"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected 12.4  got 12.4"), std::string::npos) << r.out;
}

TEST(Isolation, ExplainSaysAHangingExecEngineDidNotAnswer) {
  const Result r =
      with_request_timeout("explain " + seed("worked-example.json") + " --engine " + kHanging);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("did not answer step within 1 s"), std::string::npos) << r.out;
}

// The input itself crashes the engine: the raw fixture is written first, then shrunk
// keeping the crash (each candidate in a child that must die the same way).
TEST(Isolation, ShrinkShrinksAFixtureThatCrashesTheEngine) {
  const fs::path out = scratch("shrink-crash");
  const Result r = run_kvfuzz("shrink " + seed("gqa-group-three.json") + " --quiet --out " +
                              out.string() + " --engine " + crashing("segfault"));
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("fails crash/SIGSEGV: shrunk from 2 ops, 3 tokens to 1 op, 1 token"),
            std::string::npos)
      << r.out;
  ASSERT_EQ(json_files(out).size(), 1u) << r.out;
  ASSERT_EQ(json_files(out / "raw").size(), 1u);
  const kvfuzz::Scenario shrunk = kvfuzz::load_fixture(json_files(out)[0]);
  EXPECT_EQ(shrunk.program.size(), 1u);
  EXPECT_EQ(shrunk.provenance.engine, crashing("segfault"));
}

// Candidates that split a chunk down to one token crash this engine; the input (chunks of
// three and two tokens) only fails prefix. Each crash is a rejected candidate and the shrink
// ends with a fixture that still fails prefix, every chunk of at least two tokens. In this
// process (--no-fork) the first such candidate ends kvfuzz.
TEST(Isolation, AShrinkCandidateThatCrashesIsRejectedNotTheEndOfTheShrink) {
  const fs::path out = scratch("shrink-candidate");
  const std::string args = "shrink " + seed("worked-example.json") + " --quiet --out " +
                           out.string() + " --engine " + crashing("segfault-on-one-token");
  const Result r = run_kvfuzz(args);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("fails prefix/"), std::string::npos) << r.out;
  ASSERT_EQ(json_files(out).size(), 1u) << r.out;
  const kvfuzz::Scenario shrunk = kvfuzz::load_fixture(json_files(out)[0]);
  for (const kvfuzz::Op& op : shrunk.program) {
    if (!op.tokens.empty()) {
      EXPECT_GE(op.tokens.size(), 2u);  // an append
    }
    for (const kvfuzz::Chunk& chunk : op.chunks) EXPECT_GE(chunk.tokens.size(), 2u);
  }
  // kvfuzz dies (status 139, or 1 after AddressSanitizer's report) before saving a result.
  fs::remove_all(out);
  const Result unisolated = run_kvfuzz(args + " --no-fork");
  EXPECT_NE(unisolated.status, 0) << unisolated.out;
  EXPECT_EQ(unisolated.out.find("saved to"), std::string::npos) << unisolated.out;
  EXPECT_TRUE(json_files(out).empty());
}

TEST(Isolation, ShrinkOfAHangingExecEngineEnds) {
  const fs::path out = scratch("shrink-hang");
  const Result r =
      with_request_timeout("shrink " + seed("worked-example.json") + " --quiet --time 20 --out " +
                           out.string() + " --engine " + kHanging);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("fails prefix/engine-error"), std::string::npos) << r.out;
  EXPECT_EQ(json_files(out).size(), 1u) << r.out;
}

// Judged in children or here, a shrink is the same: the same candidates, the same result.
TEST(Isolation, AShrinkInChildrenEqualsOneInThisProcess) {
  std::vector<std::string> texts;
  for (const char* mode : {"", " --no-fork"}) {
    const fs::path out = scratch(std::string("same") + (mode[0] ? "-no-fork" : ""));
    const Result r = run_kvfuzz("shrink " + seed("gqa-group-three.json") + " --quiet --out " +
                                out.string() + " --engine mask-origin" + mode);
    ASSERT_EQ(r.status, 1) << r.out << r.err;
    ASSERT_EQ(json_files(out).size(), 1u);
    kvfuzz::Scenario shrunk = kvfuzz::load_fixture(json_files(out)[0]);
    shrunk.note.clear();  // it holds the seconds the shrink took
    texts.push_back(kvfuzz::write_fixture(shrunk));
    texts.back() += r.out.substr(0, r.out.find(" in "));  // "... N of M candidates accepted"
  }
  EXPECT_EQ(texts[0], texts[1]);
}

}  // namespace
