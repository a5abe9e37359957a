// `kvfuzz check`'s filters (harness/cli/check_filters.h, docs/filters.md) as a user runs
// them: each one narrows what check runs (a mutant whose bug needs what the filter takes
// away is no longer rejected, a cache-state event the filter rules out is never hit, a
// saved case has the layout asked for), each compared with the same run without it; and
// bad or impossible values exit 2 with one line naming the flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "kvfuzz/fixture_io.h"

namespace {

namespace fs = std::filesystem;
using Result = kvfuzz::test::CommandResult;

const fs::path kOut = fs::temp_directory_path() / ("kvfuzz-filters-" + std::to_string(::getpid()));

// Judged by prefix alone: the filters shape the scenarios, which prefix judges as they are,
// while an invariance's variants can reach a mutant's bug by another road (stale-kv fails
// batch under --without reset, at an epoch 1 that a reset did not make).
Result check(const std::string& args) {
  return kvfuzz::test::run_kvfuzz("check --quiet --property prefix --cases 100 --out " +
                                  kOut.string() + " " + args);
}

int lines(const std::string& text) {
  int count = 0;
  for (char c : text) count += c == '\n';
  return count;
}

// The count check prints for a cache-state event; -1 when the line is missing.
long event_count(const std::string& out, const std::string& event) {
  const size_t at = out.find("  " + event + " ");
  if (at == std::string::npos) return -1;
  std::istringstream line(out.substr(at + event.size() + 2));
  long count = -1;
  line >> count;
  return count;
}

// A mutant whose bug needs an op is rejected by default and no longer with that op left out.
TEST(CheckFilters, LeavingAnOpOutSparesTheMutantThatNeedsIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"reset", "stale-kv,stale-position"},
      {"truncate", "truncate-keeps-position"},
      {"fork", "fork-restarts-positions"}};
  for (const auto& [op, mutants] : cases) {
    const Result by_default = check("--engine " + mutants);
    EXPECT_EQ(by_default.status, 0) << op << "\n" << by_default.out << by_default.err;
    const Result without = check("--engine " + mutants + " --without " + op);
    EXPECT_EQ(without.status, 1) << op << "\n" << without.out << without.err;
    EXPECT_NE(without.out.find("NOT REJECTED"), std::string::npos) << without.out;
  }
}

TEST(CheckFilters, WithoutResetsOrBatchesTheirEventsAreNeverHit) {
  const Result by_default = check("--engine paged");
  ASSERT_EQ(by_default.status, 0) << by_default.out << by_default.err;
  EXPECT_GT(event_count(by_default.out, "reset-of-nonempty-sequence"), 0) << by_default.out;
  EXPECT_GT(event_count(by_default.out, "batch-with-mixed-prefix-lengths"), 0) << by_default.out;
  const Result without = check("--engine paged --without reset,batch");
  ASSERT_EQ(without.status, 0) << without.out << without.err;
  EXPECT_EQ(event_count(without.out, "reset-of-nonempty-sequence"), 0) << without.out;
  EXPECT_EQ(event_count(without.out, "reuse-after-reset"), 0) << without.out;
  EXPECT_EQ(event_count(without.out, "batch-with-mixed-prefix-lengths"), 0) << without.out;
  EXPECT_GT(event_count(without.out, "page-boundary-crossing"), 0) << without.out;
}

TEST(CheckFilters, WindowOffAndAShortContextRuleOutWhatNeedsThem) {
  const Result by_default = check("--engine flash");
  ASSERT_EQ(by_default.status, 0) << by_default.out << by_default.err;
  EXPECT_GT(event_count(by_default.out, "window-slide"), 0) << by_default.out;
  EXPECT_GT(event_count(by_default.out, "split-decode-path"), 0) << by_default.out;
  const Result narrow = check("--engine flash --window off --max-context 16");
  ASSERT_EQ(narrow.status, 0) << narrow.out << narrow.err;
  EXPECT_EQ(event_count(narrow.out, "window-slide"), 0) << narrow.out;
  EXPECT_EQ(event_count(narrow.out, "split-decode-path"), 0) << narrow.out;  // 32 keys
}

// One sequence: no fork has a destination, so the fork mutant passes.
TEST(CheckFilters, OneSequenceSparesTheForkMutant) {
  const Result r = check("--engine fork-restarts-positions --sequences 1");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(event_count(r.out, "batch-with-mixed-prefix-lengths"), 0) << r.out;
}

// The case a mutant fails on, saved to disk, has the layout the filters ask for, and the
// same flags and seed save the same case.
TEST(CheckFilters, ASavedCaseHasTheFilteredLayoutAndIsReproducible) {
  const std::string args =
      "--engine mask-origin --dtype bf16 --window on --rope on --sequences 2-3 --max-context 40 "
      "--min-context 30";
  fs::remove_all(kOut);
  const Result r = check(args);
  ASSERT_EQ(r.status, 0) << r.out << r.err;  // the mutant is rejected
  std::vector<fs::path> saved;
  for (const auto& entry : fs::directory_iterator(kOut)) saved.push_back(entry.path());
  ASSERT_EQ(saved.size(), 1u) << r.out;
  const kvfuzz::Scenario s = kvfuzz::load_fixture(saved[0]);
  EXPECT_EQ(s.layout.dtype, kvfuzz::DType::bf16);
  EXPECT_TRUE(s.layout.window);
  EXPECT_TRUE(s.layout.rope_theta);
  EXPECT_GE(s.sequences, 2);
  EXPECT_LE(s.sequences, 3);
  EXPECT_LE(kvfuzz::max_epoch_length(s), 40);
  EXPECT_GE(kvfuzz::max_epoch_length(s), 30);
  const std::string first = kvfuzz::test::slurp(saved[0]);
  fs::remove_all(kOut);
  ASSERT_EQ(check(args).status, 0);
  EXPECT_EQ(kvfuzz::test::slurp(saved[0]), first);
  fs::remove_all(kOut);
}

// More sequences than the default sizes' four: the run is given them.
TEST(CheckFilters, ManySequencesAreThereWhenAskedFor) {
  fs::remove_all(kOut);
  const Result r = check("--engine wrong-kv-head --sequences 7");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const auto& entry : fs::directory_iterator(kOut)) {
    EXPECT_EQ(kvfuzz::load_fixture(entry.path()).sequences, 7) << entry.path();
  }
  EXPECT_FALSE(fs::is_empty(kOut));
  fs::remove_all(kOut);
}

TEST(CheckFilters, ADtypeTheEngineDoesNotSupportExitsTwoNamingBoth) {
  const Result r = check("--engine flash-f16 --dtype bf16");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--dtype: expected a supported storage dtype (f16), got bf16"),
            std::string::npos)
      << r.err;
  // Among engines of different dtypes the filter picks one: the other skips every case.
  const Result both = check("--engine flash-f16,flash-bf16 --dtype bf16");
  EXPECT_EQ(both.status, 0) << both.out << both.err;
  EXPECT_NE(both.out.find("flash-f16: 100 cases were not run on it"), std::string::npos)
      << both.out;
}

TEST(CheckFilters, BadValuesExitTwoWithOneLineNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--dtype f8", "--dtype"},
      {"--dtype f16,", "--dtype"},
      {"--window maybe", "--window"},
      {"--rope yes", "--rope"},
      {"--rope on --max-head-dim 1", "--rope"},
      {"--without spoon", "--without"},
      {"--without truncate,", "--without"},
      {"--sequences 0", "--sequences"},
      {"--sequences 3-2", "--sequences"},
      {"--sequences 9", "--sequences"},
      {"--sequences 2-x", "--sequences"},
      {"--sequences 3 --max-tokens 1000", "--sequences"},  // long contexts: 2 at most
      {"--max-context 0", "--max-context"},
      {"--max-context many", "--max-context"},
      {"--min-context 200", "--min-context"},  // the default sizes hold 160
      {"--min-context 50 --max-context 40", "--min-context"},
      {"--min-context 2000 --max-tokens 4000 --model", "--min-context"}};
  for (const auto& [args, flag] : bad) {
    const Result r = check("--engine paged " + args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(lines(r.err), 1) << args << ":\n" << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ":\n" << r.err;
  }
}

TEST(CheckFilters, TheHelpListsEveryFilter) {
  const Result r = kvfuzz::test::run_kvfuzz("check --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--dtype", "--window", "--rope", "--without", "--sequences",
                           "--max-context", "--min-context"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
