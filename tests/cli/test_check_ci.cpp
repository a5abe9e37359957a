// kvfuzz check for CI (docs/check.md): the six properties and --property, results that do
// not depend on --jobs, crashes and hangs as findings whose fixture is on disk and whose
// printed command re-runs them, --max-failures and --ignore, Ctrl-C, bad flags, the
// table's alignment and the events' case count. (The --junit report is read by a real
// JUnit parser in check_junit.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Result = kvfuzz::test::CommandResult;
using kvfuzz::test::run_kvfuzz;
using kvfuzz::test::run_shell;
using kvfuzz::test::slurp;

const fs::path kSource = KVFUZZ_SOURCE_DIR;

// A fresh folder of this test's own.
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvfuzz-check-ci-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Json json_of(const fs::path& path) {
  return Json::parse(slurp(path));
}

std::string exec_engine(const std::string& script, const std::string& args) {
  return "'exec:python3 " + (kSource / "tests/doors/exec" / script).string() + " " + args + "'";
}

// A Python engine is slow: small scenarios.
const std::string kSmall = " --max-tokens 12 --max-head-dim 4 --max-q-heads 2";

// The command a failure printed after "reproduce: ".
std::string reproduce_command(const std::string& out) {
  const size_t at = out.find("reproduce: ");
  if (at == std::string::npos) return "";
  const size_t start = at + 11;
  return out.substr(start, out.find('\n', start) - start);
}

// The table without its seconds column (the one thing that differs between runs).
std::string without_seconds(const std::string& out) {
  return std::regex_replace(out, std::regex(" +[0-9]+\\.[0-9]{3}  "), " S  ");
}

TEST(CheckCi, AllSixPropertiesByDefault) {
  const fs::path dir = scratch("six");
  const Result r = run_kvfuzz("check --engine contiguous --cases 4 --quiet --json " +
                              (dir / "s.json").string() + " --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const Json s = json_of(dir / "s.json");
  EXPECT_EQ(s["properties"],
            Json::parse(R"(["prefix","schedule","layout","poison","reset","batch"])"));
  EXPECT_EQ(s["engines"][0]["failing_cases"].size(), 6u);
  EXPECT_EQ(s["cases"], 4);
}

// An engine whose rows move by one float32 step in a batch of several sequences, while it
// claims the batch invariance bit for bit: prefix cannot see it, batch can.
TEST(CheckCi, PropertyChoosesWhatIsJudged) {
  const fs::path dir = scratch("property");
  const std::string engine = exec_engine("misbehaving_engine.py", "claims-bitwise-batch-variant");
  const std::string common =
      "check --engine " + engine + " --cases 12 --quiet" + kSmall + " --out " + dir.string();
  const Result prefix = run_kvfuzz(common + " --property prefix");
  EXPECT_EQ(prefix.status, 0) << prefix.out << prefix.err;
  const Result batch = run_kvfuzz(common + " --property batch --json " + (dir / "b.json").string());
  EXPECT_EQ(batch.status, 1) << batch.out << batch.err;
  EXPECT_EQ(json_of(dir / "b.json")["findings"][0]["signature"], "batch/mismatch");
  const Result all = run_kvfuzz(common + " --json " + (dir / "a.json").string());
  EXPECT_EQ(all.status, 1) << all.out << all.err;
  EXPECT_EQ(json_of(dir / "a.json")["findings"][0]["signature"], "batch/mismatch");
  const Result unknown = run_kvfuzz("check --property prefix,bacth");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("--property: unknown property 'bacth'"), std::string::npos)
      << unknown.err;
}

TEST(CheckCi, ResultsAreTheSameForEveryNumberOfJobs) {
  const fs::path dir = scratch("jobs");
  // 8 cases give about 60 findings over the mutants, each shrunk: a third of 25 cases'
  // cost, the same comparison.
  const std::string common =
      "check --engine every --cases 8 --max-failures 3 --quiet --out " + dir.string();
  const Result one = run_kvfuzz(common + " --jobs 1 --json " + (dir / "1.json").string());
  const Result two = run_kvfuzz(common + " --jobs 2 --json " + (dir / "2.json").string());
  const Result inline_run = run_kvfuzz(common + " --no-fork --json " + (dir / "0.json").string());
  EXPECT_EQ(one.status, two.status);
  EXPECT_EQ(without_seconds(one.out), without_seconds(two.out));
  EXPECT_EQ(slurp(dir / "1.json"), slurp(dir / "2.json"));
  // The same but for the reproduction commands, which carry --no-fork.
  Json in_workers = json_of(dir / "1.json"), in_process = json_of(dir / "0.json");
  for (Json* s : {&in_workers, &in_process}) {
    for (Json& f : (*s)["findings"]) f.erase("command");
  }
  EXPECT_EQ(in_workers, in_process);
  EXPECT_FALSE(json_of(dir / "1.json")["findings"].empty());
}

// A crash: the finding names the signal and the case seed, its fixture is on disk, and the
// printed command re-runs exactly that case with the same finding.
void expect_crash_found_and_reproduced(const std::string& engine, const std::string& signature,
                                       const std::string& name, const std::string& last_words) {
  const fs::path dir = scratch(name);
  const Result r = run_kvfuzz("check --engine " + engine + " --cases 3 --jobs 2 --quiet --out " +
                              dir.string() + " --json " + (dir / "s.json").string());
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  const Json finding = json_of(dir / "s.json")["findings"][0];
  EXPECT_EQ(finding["signature"], signature);
  EXPECT_TRUE(fs::exists(finding["fixture"].get<std::string>())) << finding;
  const std::string seed = std::to_string(finding["seed"].get<uint64_t>());
  // The same as a string, for readers that round numbers above 2^53.
  EXPECT_EQ(finding["seed_text"], seed);
  EXPECT_NE(r.out.find("case seed " + seed), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(signature), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(last_words), std::string::npos) << "the worker's stderr tail: " << r.out;
  const Json fixture = json_of(finding["fixture"].get<std::string>());
  EXPECT_EQ(std::to_string(fixture["provenance"]["seed"].get<uint64_t>()), seed);

  const std::string command = reproduce_command(r.out);
  ASSERT_NE(command.find("--case-seed " + seed), std::string::npos) << command;
  EXPECT_EQ(command.find("--cases"), std::string::npos) << command;
  const Result again = run_shell(command + " --json " + (dir / "again.json").string());
  EXPECT_EQ(again.status, 1) << again.out << again.err;
  const Json rerun = json_of(dir / "again.json");
  EXPECT_EQ(rerun["cases"], 1);
  EXPECT_EQ(rerun["findings"][0]["signature"], signature);
  EXPECT_EQ(rerun["findings"][0]["seed"], finding["seed"]);
}

TEST(CheckCi, ASegfaultingPluginIsAFinding) {
  expect_crash_found_and_reproduced(std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":segfault",
                                    "crash/SIGSEGV", "segfault", "died of SIGSEGV");
}

// A crash after much stderr keeps the first words (a crash handler's, where it says what
// happened) and the last (a sanitizer's summary), the bytes between them counted.
TEST(CheckCi, ACrashAfterMuchStderrKeepsItsFirstAndLastWords) {
  const std::string engine = std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":noisy-segfault";
  expect_crash_found_and_reproduced(
      engine, "crash/SIGSEGV", "noisy-segfault",
      "the worker's last stderr:\ncrashing_engines: first words before the crash\n");
  const fs::path dir = scratch("noisy-first-words");
  const Result r =
      run_kvfuzz("check --engine " + engine + " --cases 1 --quiet --out " + dir.string());
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("\\[\\.\\.\\. [0-9]+ bytes left out \\.\\.\\.\\]")))
      << r.out;
  // The last words: the engine's, or under AddressSanitizer its report of the SEGV, which
  // follows them.
  EXPECT_TRUE(r.out.find("crashing_engines: last words before the crash") != std::string::npos ||
              r.out.find("SUMMARY: AddressSanitizer: SEGV") != std::string::npos)
      << r.out;
  EXPECT_LT(r.out.size(), 20000u) << "the noise is cut, not printed whole";
}

TEST(CheckCi, AnAbortingPluginIsAFinding) {
  expect_crash_found_and_reproduced(std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":abort",
                                    "crash/SIGABRT", "abort",
                                    "the worker's last stderr:\ncrashing_engines: assertion "
                                    "'block < pool' failed");
}

TEST(CheckCi, AnEngineExitingAsASanitizerDoesIsAFinding) {
  expect_crash_found_and_reproduced(std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":exit",
                                    "asan/heap-buffer-overflow", "exit",
                                    "ERROR: AddressSanitizer: heap-buffer-overflow");
}

// A crash says which property was being judged: this engine dies when the second engine
// of its worker is made, after prefix judged the first, so under schedule. Its report line,
// the JSON's property and the JUnit failure's message all say so, and prefix's verdict on
// the case is kept.
TEST(CheckCi, ACrashSaysWhichPropertyWasBeingJudged) {
  const fs::path dir = scratch("judging");
  const std::string engine =
      std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":segfault-in-second";
  const Result r = run_kvfuzz("check --engine " + engine +
                              " --cases 1 --max-failures 2 --quiet --property prefix,schedule,batch"
                              " --out " +
                              dir.string() + " --json " + (dir / "s.json").string() + " --junit " +
                              (dir / "s.xml").string());
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  const std::string line = "crash: the worker died of SIGSEGV while judging schedule";
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  const Json s = json_of(dir / "s.json");
  const Json* crash = nullptr;
  for (const Json& f : s["findings"]) {
    if (f["signature"] == "crash/SIGSEGV") crash = &f;
  }
  ASSERT_NE(crash, nullptr) << s;
  EXPECT_EQ((*crash)["property"], "schedule");
  EXPECT_EQ((*crash)["message"], line);
  // prefix's verdict, reached before the crash (zero rows: a mismatch), was not lost with it.
  EXPECT_EQ(s["findings"][0]["property"], "prefix");
  EXPECT_EQ(s["engines"][0]["failing_cases"]["prefix"], 1);
  // A verdict that was never reached counts as a crash, not as schedule failing.
  EXPECT_EQ(s["engines"][0]["failing_cases"]["schedule"], 0);
  EXPECT_EQ(s["engines"][0]["crashes"], 1);
  const std::string xml = slurp(dir / "s.xml");
  EXPECT_NE(xml.find("name=\"crash\"><failure type=\"crash/SIGSEGV\" message=\"" + line + "\""),
            std::string::npos)
      << xml;
}

// An engine that crashes or hangs when it is made, before any case: check asks it for its
// declarations in a child, so kvfuzz lives to say so in one line, with its own exit status
// (3: the run cannot start), writing nothing under --out.
void expect_probe_failure(const std::string& name, const std::string& flags,
                          const std::string& how) {
  const fs::path dir = scratch(name);
  const auto start = std::chrono::steady_clock::now();
  const std::string engine = "plugin:" + std::string(KVFUZZ_PLUGIN_CRASHING) + ":" + name;
  const Result r =
      run_kvfuzz("check --engine " + engine + " --cases 2 --quiet " + flags + " --out " +
                 (dir / "out").string() + " --json " + (dir / "s.json").string());
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("kvfuzz: check: engine '" + engine + "' " + how), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the run cannot start"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(CheckCi, AnEngineThatCrashesWhenMadeIsOneLine) {
  expect_probe_failure("segfault-in-create", "", "died of SIGSEGV while it was made");
}

TEST(CheckCi, AnEngineThatHangsWhenMadeIsOneLine) {
  expect_probe_failure("hang-in-create", "--timeout 1",
                       "was still being made or asked for its declarations after 1 s");
}

// An engine error: a finding whose report names no key range (no row was compared).
TEST(CheckCi, AnEngineErrorReportsNoKeyRange) {
  const fs::path dir = scratch("engine-error");
  const std::string engine = exec_engine("misbehaving_engine.py", "error");
  const Result r = run_kvfuzz("check --engine " + engine + " --cases 1 --quiet" + kSmall +
                              " --out " + dir.string());
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("prefix/engine-error"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out of KV blocks"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("should see keys"), std::string::npos) << r.out;
}

TEST(CheckCi, AHangingExecEngineIsATimeoutFinding) {
  const fs::path dir = scratch("hang");
  const std::string engine = exec_engine("hang_on_step.py", "1");
  // Two cases: the second runs on the worker started in place of the one killed.
  const Result r =
      run_kvfuzz("check --engine " + engine + " --cases 2 --timeout 1 --max-failures 2 --quiet" +
                 kSmall + " --out " + dir.string() + " --json " + (dir / "s.json").string());
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  const Json finding = json_of(dir / "s.json")["findings"][0];
  EXPECT_EQ(finding["signature"], "timeout");
  EXPECT_EQ(finding["duplicates"], 1);
  EXPECT_TRUE(fs::exists(finding["fixture"].get<std::string>())) << finding;
  EXPECT_NE(r.out.find("longer than 1 s (--timeout)"), std::string::npos) << r.out;
  const std::string command = reproduce_command(r.out);
  ASSERT_NE(command.find("--timeout 1"), std::string::npos) << command;
  const Result again = run_shell(command);
  EXPECT_EQ(again.status, 1) << again.out << again.err;
  EXPECT_NE(again.out.find("timeout"), std::string::npos) << again.out;
}

// A case ends at its engine's first hang (CaseJudge): the engine is let hang once, not once
// per property (six, each waiting out KVFUZZ_ENGINE_TIMEOUT again before the change).
TEST(CheckCi, ACaseEndsAtItsEnginesFirstHang) {
  const fs::path dir = scratch("first-hang");
  const fs::path log = dir / "hangs.log";
  const std::string engine = exec_engine("hang_on_step.py", "1");
  const Result r =
      run_shell("HANG_ON_STEP_LOG=" + log.string() + " KVFUZZ_ENGINE_TIMEOUT=1 " +
                std::string(KVFUZZ_BINARY) + " check --engine " + engine + " --cases 1 --quiet" +
                kSmall + " --out " + dir.string() + " --json " + (dir / "s.json").string());
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(slurp(log), "hang\n") << r.out;
  const Json s = json_of(dir / "s.json");
  ASSERT_EQ(s["findings"].size(), 1u) << s;
  EXPECT_EQ(s["findings"][0]["signature"], "prefix/engine-error");
  EXPECT_NE(r.out.find("did not answer step within 1 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the engine hung while judging prefix"), std::string::npos) << r.out;
}

TEST(CheckCi, MaxFailuresKeepsGoingAndCountsDuplicates) {
  const fs::path dir = scratch("max");
  const std::string engine = std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":segfault";
  const Result r = run_kvfuzz("check --engine " + engine + " --cases 4 --max-failures 2 --quiet" +
                              " --out " + dir.string() + " --json " + (dir / "s.json").string());
  EXPECT_EQ(r.status, 1);
  const Json s = json_of(dir / "s.json");
  EXPECT_EQ(s["cases"], 4);  // one signature: the run went on to the end
  ASSERT_EQ(s["findings"].size(), 1u);
  EXPECT_EQ(s["findings"][0]["duplicates"], 3);
  // A mutant with two distinct failures: both kept, each with its own fixture.
  const Result mutant = run_kvfuzz(
      "check --engine stale-kv --cases 200 --max-failures 2 --quiet"
      " --out " +
      dir.string() + " --json " + (dir / "m.json").string());
  EXPECT_EQ(mutant.status, 0) << mutant.out;
  const Json m = json_of(dir / "m.json");
  ASSERT_EQ(m["findings"].size(), 2u) << m;
  EXPECT_NE(m["findings"][0]["signature"], m["findings"][1]["signature"]);
  EXPECT_NE(m["findings"][0]["fixture"], m["findings"][1]["fixture"]);
}

TEST(CheckCi, IgnoredSignaturesNeitherFailNorEndTheRun) {
  const fs::path dir = scratch("ignore");
  const std::string engine = std::string("plugin:") + KVFUZZ_PLUGIN_CRASHING + ":segfault";
  const Result r =
      run_kvfuzz("check --engine " + engine + " --cases 3 --ignore crash/SIGSEGV --quiet --out " +
                 dir.string() + " --json " + (dir / "s.json").string());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  const Json s = json_of(dir / "s.json");
  EXPECT_EQ(s["cases"], 3);
  EXPECT_EQ(s["engines"][0]["ignored"], 3);
  EXPECT_NE(r.out.find("[3 ignored]"), std::string::npos) << r.out;
}

// A bug already filed (a shrunk fixture) is replayed first and set aside when the run finds it
// again; a fixture the engine passes is a known bug now passing; a bad --known is bad input.
TEST(CheckCi, KnownBugsAreReplayedAndSetAsideWhileTheRunLooksForOthers) {
  const fs::path dir = scratch("known");
  const std::string engine =
      "'exec:python3 " + (kSource / "examples/python-engine/buggy_engine.py").string() + "'";
  const std::string run =
      "check --engine " + engine + kSmall + " --cases 20 --property prefix --quiet --seed 3 --out ";
  const Result first = run_kvfuzz(run + (dir / "first").string());
  ASSERT_EQ(first.status, 1) << first.out << first.err;
  std::vector<fs::path> raw;
  for (const auto& entry : fs::directory_iterator(dir / "first")) raw.push_back(entry.path());
  ASSERT_EQ(raw.size(), 1u) << first.out;
  // Filed: shrunk as kvfuzz shrink shrinks it.
  const Result shrunk = run_kvfuzz("shrink " + raw[0].string() + " --engine " + engine +
                                   " --time 120 --quiet --out " + (dir / "known").string() +
                                   " --raw " + (dir / "known-raw").string());
  ASSERT_EQ(shrunk.status, 1) << shrunk.out << shrunk.err;  // 1: it still fails, shrunk
  ASSERT_EQ(std::distance(fs::directory_iterator(dir / "known"), fs::directory_iterator()), 1)
      << shrunk.out;
  const fs::path passing = kSource / "corpus/seeds/batched-step-three-sequences.json";
  // A sink the engine does not declare: no engine of the run can be given it.
  const fs::path outside = kSource / "corpus/seeds/worked-example-sink.json";
  const Result again =
      run_kvfuzz(run + (dir / "again").string() + " --shrink-seconds 120 --known " +
                 (dir / "known").string() + " --known " + passing.string() + " --known " +
                 outside.string() + " --json " + (dir / "s.json").string());
  EXPECT_EQ(again.status, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("known, still failing: " + (dir / "known").string()), std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find("known, now passing: " + passing.string()), std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find("known, not judged: " + outside.string()), std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find("shrinks to the known bug"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find(" known]"), std::string::npos) << again.out;
  const Json s = json_of(dir / "s.json");
  ASSERT_FALSE(s["findings"].empty()) << s;
  EXPECT_TRUE(s["findings"][0]["known"].is_string()) << s;
  // Without --known the same run fails, as before.
  EXPECT_EQ(run_kvfuzz(run + (dir / "plain").string()).status, 1);
  const Result bad =
      run_kvfuzz(run + (dir / "bad").string() + " --known " + (dir / "nothing-here").string());
  EXPECT_EQ(bad.status, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--known " + (dir / "nothing-here").string() +
                         ": expected a fixture file or a folder of fixtures"),
            std::string::npos)
      << bad.err;
}

// One bug seen through two properties: with --shrink-seconds each finding is shrunk, and
// reset's shrinks to prefix's case, so it is counted as prefix's root cause again.
TEST(CheckCi, FindingsThatShrinkToOneCaseAreOneRootCause) {
  const fs::path dir = scratch("root-cause");
  const std::string engine =
      "'exec:python3 " + (kSource / "examples/python-engine/buggy_engine.py").string() + "'";
  const Result r = run_kvfuzz("check --engine " + engine +
                              " --cases 20 --seed 3 --max-failures 6 --shrink-seconds 30 --quiet "
                              "--out " +
                              dir.string() + " --json " + (dir / "s.json").string());
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("reset/wrong-position (case 6) shrinks to the case of "
                       "prefix/wrong-position (case 6): the same root cause"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" of the same root cause)"), std::string::npos) << r.out;
  int merged = 0;
  const Json summary = json_of(dir / "s.json");
  for (const Json& f : summary["findings"]) {
    if (f["same_cause_as"].is_string()) {
      ++merged;
      EXPECT_EQ(f["same_cause_as"], "prefix/wrong-position (case 6)") << f;
    }
  }
  EXPECT_EQ(merged, 1);
}

TEST(CheckCi, ACaseSeedOfAPropertyFailureReproducesIt) {
  const fs::path dir = scratch("case-seed");
  const Result r = run_kvfuzz("check --engine mask-origin --cases 20 --quiet --out " +
                              dir.string() + " --json " + (dir / "s.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const Json finding = json_of(dir / "s.json")["findings"][0];
  const Result again =
      run_shell(finding["command"].get<std::string>() + " --json " + (dir / "again.json").string());
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(json_of(dir / "again.json")["findings"][0]["signature"], finding["signature"]);
  EXPECT_NE(again.out.find("rejected at case 1"), std::string::npos) << again.out;
}

// (Not --quiet: the progress line is checked too.)
TEST(CheckCi, CtrlCPrintsTheSummarySoFarAndExits130) {
  const fs::path dir = scratch("interrupt");
  const std::string run = std::string(KVFUZZ_BINARY) +
                          " check --engine all --cases 1000000 --jobs 2 --out " + dir.string() +
                          " --json " + (dir / "s.json").string() + " --junit " +
                          (dir / "s.xml").string();
  // sh leaves SIGINT ignored for a background job; kvfuzz installs its own handler. The
  // interrupt is sent once the progress line counts a finished case (up to 120 s), not
  // after a fixed 3 s, which a loaded CI machine may spend before the first case ends.
  const std::string err = (dir / "err.txt").string();
  const Result r = run_shell(
      "(" + run + " > " + (dir / "out.txt").string() + " 2> " + err +
      " & pid=$!; i=0; while [ $i -lt 1200 ] && ! grep -Eq 'check: [1-9][0-9]*/1000000 cases' " +
      err + "; do sleep 0.1; i=$((i+1)); done; kill -INT $pid; wait $pid; echo status=$?; cat " +
      err + " >&2)");
  EXPECT_NE(r.out.find("status=130"), std::string::npos) << r.out << r.err;
  const std::string out = slurp(dir / "out.txt");
  EXPECT_NE(out.find("interrupted after"), std::string::npos) << out;
  EXPECT_NE(out.find("engine "), std::string::npos) << out;
  const Json s = json_of(dir / "s.json");
  EXPECT_TRUE(s["interrupted"].get<bool>());
  EXPECT_GT(s["cases"].get<int>(), 0);
  EXPECT_LT(s["cases"].get<int>(), 1000000);
  EXPECT_TRUE(fs::exists(dir / "s.xml"));
  // The progress line: cases done of the total, findings, an ETA and the engines under way.
  EXPECT_TRUE(std::regex_search(r.err, std::regex("check: [0-9]+/1000000 cases, 0 findings, [0-9]+ "
                                                  "s, ETA [0-9]+ s; running [a-z]")))
      << r.err;
}

// Every file below `dir`, relative to it, sorted.
std::vector<std::string> files_below(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), dir).string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// kvfuzz run in `cwd`, as a user in their own project folder runs it.
Result run_in(const fs::path& cwd, const std::string& args) {
  return run_shell("cd '" + cwd.string() + "' && " + KVFUZZ_BINARY + " " + args);
}

// Nothing is written into the working directory unasked: replay and explain write nothing,
// check writes under kvfuzz-out/ (its --out), and shrink's result and raw fixture go under
// kvfuzz-out/shrunk/ (its --out), never into corpus/ unless asked.
TEST(CheckCi, NothingIsWrittenIntoTheWorkingDirectoryUnasked) {
  const fs::path cwd = scratch("cwd");
  const std::string worked = (kSource / "corpus/seeds/worked-example.json").string();
  EXPECT_EQ(run_in(cwd, "replay " + worked + " --engine mask-origin").status, 1);
  EXPECT_EQ(run_in(cwd, "explain " + worked + " --engine mask-origin").status, 1);
  EXPECT_EQ(files_below(cwd), std::vector<std::string>{});
  const Result check = run_in(cwd, "check --engine mask-origin --cases 3 --quiet");
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  const std::vector<std::string> checked = files_below(cwd);
  ASSERT_EQ(checked.size(), 1u);
  EXPECT_TRUE(checked[0].starts_with("kvfuzz-out/check-mask-origin-")) << checked[0];
  fs::remove_all(cwd / "kvfuzz-out");
  const Result shrink = run_in(cwd, "shrink " + worked + " --engine mask-origin --quiet");
  EXPECT_EQ(shrink.status, 1) << shrink.out << shrink.err;
  const std::vector<std::string> shrunk = files_below(cwd);
  ASSERT_EQ(shrunk.size(), 2u);
  EXPECT_TRUE(shrunk[0].starts_with("kvfuzz-out/shrunk/mask-origin-prefix-mismatch-")) << shrunk[0];
  EXPECT_TRUE(shrunk[1].starts_with("kvfuzz-out/shrunk/raw/mask-origin-prefix-mismatch-"))
      << shrunk[1];
}

// shrink --out DIR puts the raw fixture under DIR too, except when DIR is inside a corpus,
// where an unshrunk fixture would become a corpus test: then kvfuzz-out/raw.
TEST(CheckCi, ShrinksRawFixtureFollowsOutButNeverIntoACorpus) {
  const fs::path cwd = scratch("shrink-out");
  const std::string worked = (kSource / "corpus/seeds/worked-example.json").string();
  const fs::path elsewhere = cwd / "elsewhere";
  fs::create_directories(cwd / "here");
  EXPECT_EQ(run_in(cwd / "here",
                   "shrink " + worked + " --engine mask-origin --quiet --out " + elsewhere.string())
                .status,
            1);
  EXPECT_EQ(files_below(cwd / "here"), std::vector<std::string>{});
  ASSERT_EQ(files_below(elsewhere).size(), 2u);
  EXPECT_TRUE(files_below(elsewhere)[1].starts_with("raw/")) << files_below(elsewhere)[1];
  EXPECT_EQ(run_in(cwd / "here",
                   "shrink " + worked + " --engine mask-origin --quiet --out corpus/regressions")
                .status,
            1);
  const std::vector<std::string> filed = files_below(cwd / "here");
  ASSERT_EQ(filed.size(), 2u);
  EXPECT_TRUE(filed[0].starts_with("corpus/regressions/mask-origin-")) << filed[0];
  EXPECT_TRUE(filed[1].starts_with("kvfuzz-out/raw/mask-origin-")) << filed[1];
}

TEST(CheckCi, BadFlagsExit2WithOneLine) {
  for (const std::string flags :
       {"--jobs 0", "--timeout 0", "--case-seed x", "--max-failures 0", "--property nope"}) {
    const Result r = run_kvfuzz("check --engine contiguous " + flags);
    EXPECT_EQ(r.status, 2) << flags << ": " << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
  }
}

TEST(CheckCi, TheTableAlignsLongNames) {
  const fs::path dir = scratch("align");
  const std::string engine = exec_engine("hang_on_step.py", "1000000");
  const Result r = run_kvfuzz("check --engine " + engine + " --cases 1 --quiet" + kSmall +
                              " --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string line, header, row;
  while (std::getline(lines, line)) {
    if (line.starts_with("engine ")) header = line;
    if (line.starts_with("exec:")) row = line;
  }
  ASSERT_FALSE(header.empty());
  ASSERT_FALSE(row.empty());
  EXPECT_EQ(header.find(" kind "), row.find(" honest "));
}

TEST(CheckCi, EventsCountTheCasesRun) {
  const fs::path dir = scratch("events");
  const Result r = run_kvfuzz("check --engine stale-kv --cases 500 --quiet --out " + dir.string() +
                              " --json " + (dir / "s.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const int rejected_at = json_of(dir / "s.json")["findings"][0]["case"].get<int>();
  ASSERT_LT(rejected_at, 500);
  EXPECT_NE(r.out.find("cache-state events over " + std::to_string(rejected_at) + " cases"),
            std::string::npos)
      << r.out;
}

// A fixture that describes its own ops but whose hand-written expect rows the reference
// disagrees with is a mismatch (exit 1); a malformed fixture is bad input (exit 2).
TEST(CheckCi, AWrongExpectIsAMismatchAMalformedFixtureIsBadInput) {
  const fs::path dir = scratch("expect");
  std::string text = slurp(kSource / "corpus/seeds/empty-cache.json");
  const std::string right = "\"values\": [[1.5]]";
  ASSERT_NE(text.find(right), std::string::npos);
  std::string wrong = text;
  wrong.replace(wrong.find(right), right.size(), "\"values\": [[1.25]]");
  std::ofstream(dir / "wrong-expect.json") << wrong;
  const Result mismatch = run_kvfuzz("replay " + (dir / "wrong-expect.json").string());
  EXPECT_EQ(mismatch.status, 1) << mismatch.out << mismatch.err;
  EXPECT_NE(mismatch.out.find("disagrees with the fixture's expect rows"), std::string::npos)
      << mismatch.out;
  std::string malformed = text;
  malformed.replace(malformed.find(right), right.size(), "\"values\": [[\"1.5\"]]");
  std::ofstream(dir / "malformed.json") << malformed;
  const Result bad = run_kvfuzz("replay " + (dir / "malformed.json").string());
  EXPECT_EQ(bad.status, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("$.expect[1]"), std::string::npos) << bad.err;
}

}  // namespace
