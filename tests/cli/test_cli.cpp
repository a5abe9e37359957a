// The kvfuzz command as a user runs it: exit statuses (0 pass, 1 mismatch, 2 bad input),
// one-line errors, and the reports a user reads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"

namespace {

namespace fs = std::filesystem;
const fs::path kSource = KVFUZZ_SOURCE_DIR;

using kvfuzz::test::run_shell;
using kvfuzz::test::slurp;
using Result = kvfuzz::test::CommandResult;

Result kvfuzz(const std::string& args) {
  return kvfuzz::test::run_kvfuzz(args);
}

int lines(const std::string& text) {
  int count = 0;
  for (char c : text) count += c == '\n';
  return count;
}

std::string seed(const char* name) {
  return (kSource / "corpus/seeds" / name).string();
}

TEST(Cli, ReplayOfTheSeedsPassesOnEveryHonestEngine) {
  const Result r = kvfuzz("replay " + (kSource / "corpus/seeds").string());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ok   "), std::string::npos);
  EXPECT_NE(r.out.find("0 failed, 0 bad"), std::string::npos) << r.out;
}

// The low-precision engines skip the seeds of other dtypes: said once per engine and reason
// at the end ("flash-bf16 skipped 25 fixtures: the fixture lies outside its supports: storage
// dtype f32 ..."), never on each fixture's line (before: a "skipped:" line of about 400
// characters per fixture). Each replays the worked example in its own dtype.
TEST(Cli, ReplaySaysEachSkipOncePerEngineAndReason) {
  const fs::path seeds = kSource / "corpus/seeds";
  int f32 = 0, fixtures = 0;
  std::map<std::string, int> of_dtype;
  for (const auto& entry : fs::directory_iterator(seeds)) {
    if (entry.path().extension() != ".json") continue;
    ++fixtures;
    for (const char* dtype : {"f32", "f16", "bf16"}) {
      of_dtype[dtype] += slurp(entry.path()).find("\"dtype\": \"" + std::string(dtype) + "\"") !=
                         std::string::npos;
    }
  }
  f32 = of_dtype["f32"];
  ASSERT_GT(f32, 1);
  ASSERT_GE(of_dtype["f16"], 1);
  ASSERT_GE(of_dtype["bf16"], 1);
  const Result r = kvfuzz("replay " + seeds.string() + " --engine paged,flash-bf16,flash-f16");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("skipped:"), std::string::npos) << r.out;
  std::istringstream out(r.out);
  std::vector<std::string> skip_lines;
  for (std::string line; std::getline(out, line);) {
    if (line.find(" skipped ") != std::string::npos &&
        line.find(": the fixture ") != std::string::npos)
      skip_lines.push_back(line);
  }
  // One per low-precision engine and reason: the f32 seeds, and the other 16-bit dtype's.
  ASSERT_EQ(skip_lines.size(), 4u) << r.out;
  for (const auto& [engine, other] :
       {std::pair{"flash-bf16", "f16"}, std::pair{"flash-f16", "bf16"}}) {
    for (const std::string& dtype : {std::string("f32"), std::string(other)}) {
      const int count = of_dtype[dtype];
      const std::string text = std::string(engine) + " skipped " + std::to_string(count) +
                               (count == 1 ? " fixture" : " fixtures") +
                               ": the fixture lies outside its supports: storage dtype " + dtype;
      int said = 0;
      for (const std::string& line : skip_lines) said += line.starts_with(text);
      EXPECT_EQ(said, 1) << text << "\n" << r.out;
    }
  }
  EXPECT_EQ(lines(r.out), fixtures + 4 + 1) << r.out;  // a line each, the skips, the summary
}

TEST(Cli, ReplayAgainstAMutantExitsOneAndNamesTheRow) {
  const Result r = kvfuzz("replay " + seed("worked-example.json") + " --engine mask-origin");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("seq 0 epoch 0 pos 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("got 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected 7.5"), std::string::npos) << r.out;
}

TEST(Cli, EveryMalformedFixtureExitsTwoWithOneLineNamingTheFile) {
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(kSource / "tests/corpus/malformed")) {
    if (entry.path().extension() != ".json") continue;
    ++seen;
    const Result r = kvfuzz("replay " + entry.path().string());
    EXPECT_EQ(r.status, 2) << entry.path();
    EXPECT_EQ(lines(r.err), 1) << entry.path() << ":\n" << r.err;
    EXPECT_NE(r.err.find(entry.path().string() + ": "), std::string::npos) << r.err;
  }
  EXPECT_GE(seen, 20);
}

TEST(Cli, BadFlagsAndUnknownEnginesExitTwoWithOneLine) {
  const std::vector<std::string> bad = {
      "replay", "replay --no-such-flag x", "frobnicate",
      "replay " + seed("worked-example.json") + " --engine nope", "check --cases 0",
      "replay /no/such/dir", "check --seed -1", "check --seed 18446744073709551616",
      "check --seed 7x",
      // A campaign needs the fuzz targets; this build may have none (the default preset).
      "campaign --engine paged --fuzzers /no/such/dir --out /tmp/kvfuzz-cli-campaign",
      "campaign --engine nope --out /tmp/kvfuzz-cli-campaign",
      "campaign --engine paged --time forever --out /tmp/kvfuzz-cli-campaign"};
  for (const std::string& args : bad) {
    const Result r = kvfuzz(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(lines(r.err), 1) << args << ":\n" << r.err;
  }
}

// A misspelt engine in a list is bad input whose one line names the likely engine.
TEST(Cli, AMisspeltEngineIsNamed) {
  const Result r = kvfuzz("check --engine paged,flsh --cases 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown engine 'flsh' (did you mean 'flash'?)"), std::string::npos)
      << r.err;
}

TEST(Cli, AnUnknownCommandIsNamed) {
  const Result r = kvfuzz("frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
}

// A directory this user cannot list. Root reads everything, so as root the command runs
// as user nobody (CI runs as root).
TEST(Cli, AnUnreadableDirectoryIsBadInputNotACrash) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvfuzz-cli-unreadable-" + std::to_string(::getpid()));
  fs::create_directories(dir / "locked");
  fs::copy_file(seed("worked-example.json"), dir / "a.json");
  fs::permissions(dir, fs::perms::all);
  fs::permissions(dir / "locked", fs::perms::none);
  const std::string args = "replay " + dir.string();
  const Result r =
      ::geteuid() == 0
          ? run_shell("su nobody -s /bin/sh -c '" + std::string(KVFUZZ_BINARY) + " " + args + "'")
          : kvfuzz(args);
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("cannot list directory"), std::string::npos) << r.err;
  fs::permissions(dir / "locked", fs::perms::owner_all);
  fs::remove_all(dir);
}

TEST(Cli, HelpIsThereForEverySubcommand) {
  for (const char* args : {"--help", "replay --help", "explain --help", "list --help",
                           "check --help", "shrink --help", "campaign --help"}) {
    const Result r = kvfuzz(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << args;
  }
}

TEST(Cli, ListNamesEveryEngineAndMutant) {
  const Result r = kvfuzz("list");
  EXPECT_EQ(r.status, 0);
  for (const char* name : {"contiguous", "paged", "flash", "mask-origin", "stale-position",
                           "stale-kv", "page-tail-read", "wrong-kv-head"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
}

TEST(Cli, ExplainShowsTheWorkedExample) {
  const Result r = kvfuzz("explain " + seed("worked-example.json") + " --engine paged,mask-origin");
  EXPECT_EQ(r.status, 1);  // the mutant fails
  EXPECT_NE(r.out.find("keys 0..3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("7.5"), std::string::npos);
  EXPECT_NE(r.out.find("12.4"), std::string::npos);
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
  // Each row's bound and its parts, largest first: row 3 (n = 4, M = 16, zero scores).
  EXPECT_NE(r.out.find("expected 7.5  got 7.5  bound 2.71797e-05: sums 2.28882e-05, softmax "
                       "4.29154e-06 (logit error 2.38419e-07)  ok"),
            std::string::npos)
      << r.out;
}

// explain --property judges an invariance: the honest engine passes it, the mutant whose
// mask restarts at the chunk fails it, and the report names the base row a variant changes
// with the variant's value as "got" and the base run's as "expected". A fixture that records
// the property it fails is explained under it without the flag; a bad name is bad input.
TEST(Cli, ExplainJudgesTheAskedOrRecordedProperty) {
  const Result r = kvfuzz("explain " + seed("worked-example.json") +
                          " --engine paged,mask-origin --property schedule");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("property: schedule (--property)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("engine paged (honest): pass (property schedule)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("engine mask-origin (mutant): FAIL (property schedule)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("got: the variant run (the variant's row for it is seq 0 epoch 0 pos"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("expected: the base run"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("keys 0..3"), std::string::npos) << r.out;  // not prefix's row table

  const fs::path dir =
      fs::temp_directory_path() / ("kvfuzz-cli-explain-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ifstream in(seed("worked-example.json"));
  nlohmann::json fixture = nlohmann::json::parse(in);
  fixture["provenance"] = {
      {"source", "shrink"}, {"engine", "mask-origin"}, {"property", "schedule"}};
  const fs::path recorded = dir / "recorded.json";
  std::ofstream(recorded) << fixture.dump(2);
  const Result by_record = kvfuzz("explain " + recorded.string() + " --engine mask-origin");
  EXPECT_EQ(by_record.status, 1) << by_record.out << by_record.err;
  EXPECT_NE(by_record.out.find("property: schedule (the one the fixture records it fails)"),
            std::string::npos)
      << by_record.out;
  EXPECT_NE(by_record.out.find("FAIL (property schedule)"), std::string::npos) << by_record.out;

  const Result bad = kvfuzz("explain " + recorded.string() + " --property sideways");
  EXPECT_EQ(bad.status, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("sideways"), std::string::npos) << bad.err;
  fs::remove_all(dir);
}

// An engine declaring its output dtype is explained with its own bounds, plus the rounding.
TEST(Cli, ExplainShowsADeclaredEnginesBoundAndItsOutputRounding) {
  const std::string fixture = std::string(KVFUZZ_SOURCE_DIR) + "/tests/cli/bf16-rope-window.json";
  const Result r = kvfuzz("explain " + fixture + " --engine flash-bf16");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("+ half a bf16 ulp  ok"), std::string::npos) << r.out;
}

// --max-tokens above the default sizes' 160 switches to long contexts (test_long_context
// says what they reach); above limits' kMaxEpochTokens it is bad input.
TEST(Cli, MaxTokensAboveTheDefaultsChecksLongContexts) {
  const fs::path out =
      fs::temp_directory_path() / ("kvfuzz-cli-long-" + std::to_string(::getpid()));
  // prefix alone: the other properties rerun each long program several times (minutes).
  const Result r = kvfuzz(
      "check --engine all --cases 3 --seed 2 --max-tokens 2048 --property prefix --quiet --out " +
      out.string());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("BAD "), std::string::npos) << r.out;
  fs::remove_all(out);
  for (const char* args : {"check --max-tokens 16385", "check --max-tokens 0"}) {
    const Result bad = kvfuzz(args);
    EXPECT_EQ(bad.status, 2) << args;
    EXPECT_EQ(lines(bad.err), 1) << args << ":\n" << bad.err;
  }
}

// The unjudged column's explanation under the table: tests/doors/test_plugin.cpp
// (Plugin.CheckExplainsUnjudgedRowsOfAnEngineThatDeclaresNothing) shows it where rows are
// unjudged; here, where none is, it is absent.
TEST(Cli, CheckPrintsNoUnjudgedLineWhenEveryRowWasJudged) {
  const fs::path out = fs::temp_directory_path() / ("kvfuzz-cli-unj-" + std::to_string(::getpid()));
  // mask-origin fails at its first case, before any row could be unjudged; contiguous
  // declares its numerics and leaves no row unjudged in the first 30 cases of seed 1 (a
  // score spread, generate/score_spreads.h, leaves one unjudged at case 31: its draws of
  // the attention features it declares shifted the stream).
  for (const char* engine : {"mask-origin", "contiguous"}) {
    const Result none = kvfuzz(std::string("check --engine ") + engine +
                               " --cases 30 --seed 1 --quiet --out " + out.string());
    EXPECT_EQ(none.status, 0) << none.err;
    EXPECT_EQ(none.out.find("\nunjudged:"), std::string::npos) << none.out;
  }
  fs::remove_all(out);
}

TEST(Cli, CheckPassesHonestEnginesRejectsMutantsAndSavesReplayableFixtures) {
  const fs::path out = fs::temp_directory_path() / ("kvfuzz-cli-out-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const Result r =
      kvfuzz("check --engine every --cases 150 --seed 3 --quiet --out " + out.string());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("engine"), std::string::npos);
  EXPECT_EQ(r.out.find("BAD "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cache-state events over 150 cases"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("split-decode-path"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("never hit"), std::string::npos) << r.out;  // 150 cases reach them all
  // Every mutant's failing case was saved; replaying it against that mutant fails again
  // and against the honest engines passes.
  int saved = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    ++saved;
    const std::string name = entry.path().stem().string();  // check-<engine>-<seed>[-<property>]
    std::string stem = name;
    const std::string last = stem.substr(stem.rfind('-') + 1);
    if (last.find_first_not_of("0123456789") != std::string::npos) stem.resize(stem.rfind('-'));
    const std::string engine = stem.substr(6, stem.rfind('-') - 6);
    EXPECT_EQ(kvfuzz("replay " + entry.path().string() + " --engine " + engine).status, 1) << name;
    EXPECT_EQ(kvfuzz("replay " + entry.path().string()).status, 0) << name;
  }
  // The attention mutants (--engine mutants): the list's whole-model engines come after.
  const std::string full_list = kvfuzz("list").out;
  const std::string list = full_list.substr(0, full_list.find("whole-model engines"));
  int mutants = 0;
  for (size_t at = list.find(" mutant "); at != std::string::npos;
       at = list.find(" mutant ", at + 1)) {
    ++mutants;
  }
  EXPECT_GE(mutants, 7);
  EXPECT_EQ(saved, mutants);
  fs::remove_all(out);
}

// Model level from the command line: check --model judges logits and saves what fails;
// the shrunk model regression replays (failing on its mutant, passing on the honest
// engines) and explain names the logits row, its top-5 and the layer.
TEST(Cli, ModelLevelCheckReplayAndExplain) {
  const fs::path out =
      fs::temp_directory_path() / ("kvfuzz-cli-model-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const Result check = kvfuzz(
      "check --model --engine contiguous,mask-origin,wrong-kv-head "
      "--cases 20 --seed 3 --quiet --out " +
      out.string());
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_EQ(check.out.find("BAD "), std::string::npos) << check.out;
  int saved = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    ++saved;
    EXPECT_NE(slurp(entry.path()).find("\"model\""), std::string::npos) << entry.path();
    EXPECT_EQ(kvfuzz("replay " + entry.path().string()).status, 0) << entry.path();
  }
  EXPECT_EQ(saved, 2);  // the two mutants, nothing for contiguous
  // A model failure shrinks like any other: the same signature, a handful of tokens, the
  // model section kept (with fewer layers and smaller widths where the bug allows).
  for (const auto& entry : fs::directory_iterator(out)) {
    if (!entry.path().filename().string().starts_with("check-mask-origin-")) continue;
    const fs::path shrunk = out / "shrunk";
    const Result r = kvfuzz("shrink " + entry.path().string() + " --engine mask-origin --quiet " +
                            "--out " + shrunk.string() + " --raw " + (out / "raw").string());
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("fails prefix/mismatch"), std::string::npos) << r.out;
    ASSERT_TRUE(fs::is_directory(shrunk));
    for (const auto& small : fs::directory_iterator(shrunk)) {
      const std::string text = slurp(small.path());
      EXPECT_NE(text.find("\"model\""), std::string::npos) << text;
      EXPECT_EQ(kvfuzz("replay " + small.path().string() + " --engine mask-origin").status, 1);
      EXPECT_EQ(kvfuzz("replay " + small.path().string()).status, 0);
    }
  }
  fs::remove_all(out);

  const std::string regression =
      std::string(KVFUZZ_SOURCE_DIR) +
      "/corpus/regressions/mask-origin-model-prefix-mismatch-87740652.json";
  EXPECT_EQ(kvfuzz("replay " + regression).status, 0);
  EXPECT_EQ(kvfuzz("replay " + regression + " --engine mask-origin").status, 1);
  const Result explain = kvfuzz("explain " + regression + " --engine mask-origin");
  EXPECT_EQ(explain.status, 1) << explain.out << explain.err;
  for (const char* text : {"model: vocab 2, width 2, 1 layer,", "logits: first diverging row seq 0",
                           "top-5 got:", "top-5 expected:", "layer 0: first divergence"}) {
    EXPECT_NE(explain.out.find(text), std::string::npos) << text << "\n" << explain.out;
  }
  EXPECT_EQ(kvfuzz("replay " + std::string(KVFUZZ_SOURCE_DIR) + "/corpus/model").status, 0);
}

}  // namespace
