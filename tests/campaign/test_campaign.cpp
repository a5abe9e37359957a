// `kvfuzz campaign` end to end, with the real fuzz targets (sanitize preset only): a mutant
// becomes one shrunk, filed fixture however many artifacts it leaves; a second run resumes
// and files nothing twice; an engine that crashes or hangs is a finding and the campaign
// goes on; Ctrl-C stops it with the record saved, and the same command resumes it; bad
// flags are one line and status 2.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "campaign/campaign.h"
#include "command.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/property.h"
#include "support/subprocess.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;
using test::run_kvfuzz;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvfuzz-campaign-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The seed fixtures of corpus/seeds/ a test starts from. Every seed runs once when a
// target starts, and again after each crash or hang restarts it, and once more when the
// corpora are merged: under ASan the whole corpus/ (42 fixtures) made the hanging engine's
// campaign 111 s of a 30-s budget. A test names the few seeds its engine's bug needs.
const std::vector<std::string> kWorkedExample = {"worked-example.json"};
const std::vector<std::string> kTruncateAndReset = {"worked-example.json", "truncate-rollback.json",
                                                    "reset-two-requests.json"};

fs::path seed_dir(const fs::path& dir, const std::vector<std::string>& seeds) {
  const fs::path out = dir / "seeds";
  fs::create_directories(out);
  for (const std::string& name : seeds) {
    fs::copy_file(fs::path(KVFUZZ_SOURCE_DIR) / "corpus" / "seeds" / name, out / name,
                  fs::copy_options::overwrite_existing);
  }
  return out;
}

// Flags every test shares: this build's fuzz targets (a plain campaign takes the fuzz
// preset's, which this build does not make), the named seeds and the dictionary from the
// source tree (ctest runs elsewhere).
std::string common_flags(const fs::path& dir, const std::vector<std::string>& seeds,
                         int shrink_seconds = 20) {
  return " --fuzzers " + std::string(KVFUZZ_FUZZERS_DIR) + " --out " + (dir / "run").string() +
         " --regressions " + (dir / "regressions").string() + " --seeds " +
         seed_dir(dir, seeds).string() + " --dict " + KVFUZZ_SOURCE_DIR +
         "/fuzzers/fixture.dict --progress 1 --shrink-time " + std::to_string(shrink_seconds);
}

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  return files;
}

TEST(Campaign, AMutantBecomesOneShrunkFiledFixtureAndAResumeFilesNothingTwice) {
  const fs::path dir = fresh_dir("mutant");
  const std::string flags =
      " --engine mask-origin --targets prefix" + common_flags(dir, kWorkedExample);
  const test::CommandResult first = run_kvfuzz("campaign --time 8s" + flags);
  ASSERT_EQ(first.status, 1) << first.out << first.err;
  EXPECT_NE(first.err.find("campaign: 00:00:0"), std::string::npos) << first.err;  // progress

  const std::vector<fs::path> filed = json_files(dir / "regressions");
  ASSERT_EQ(filed.size(), 1u) << first.out;
  EXPECT_TRUE(filed[0].filename().string().starts_with("mask-origin-prefix-mismatch-"));
  const Scenario shrunk = load_fixture(filed[0]);
  EXPECT_EQ(shrunk.provenance.source, "shrink");
  EXPECT_FALSE(judge_property(Property::prefix, shrunk, *find_engine("mask-origin")).pass);
  EXPECT_TRUE(judge_property(Property::prefix, shrunk, *find_engine("contiguous")).pass);

  CampaignRecord record = load_campaign(dir / "run" / "campaign.json");
  EXPECT_TRUE(record.finished);
  EXPECT_GE(record.elapsed_seconds, 6);
  EXPECT_GT(record.executions, 0);
  EXPECT_FALSE(record.samples.empty());
  ASSERT_FALSE(record.findings.empty());
  std::set<std::string> signatures;
  for (const CampaignFinding& f : record.findings) signatures.insert(f.signature);
  EXPECT_EQ(signatures, std::set<std::string>{"prefix/mismatch"});
  EXPECT_LE(record.findings[0].tokens_after, record.findings[0].tokens_before);
  EXPECT_LE(record.findings[0].tokens_after, 4);
  for (size_t i = 1; i < record.findings.size(); ++i) {
    EXPECT_EQ(record.findings[i].duplicate_of, record.findings[0].artifact);
    EXPECT_TRUE(record.findings[i].filed.empty());
  }
  EXPECT_TRUE(fs::exists(dir / "run" / "report.md"));
  EXPECT_NE(test::slurp(dir / "run" / "report.html").find("<svg"), std::string::npos);

  // The same command with a longer budget resumes: more time, the same single filing.
  const size_t findings_before = record.findings.size();
  const test::CommandResult second = run_kvfuzz("campaign --time 14s" + flags);
  ASSERT_EQ(second.status, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("resuming"), std::string::npos) << second.err;
  EXPECT_EQ(json_files(dir / "regressions").size(), 1u);
  record = load_campaign(dir / "run" / "campaign.json");
  EXPECT_GE(record.elapsed_seconds, 12);
  EXPECT_TRUE(record.finished);
  EXPECT_GE(record.findings.size(), findings_before);
}

// The doors for users' engines lead into campaigns too: the fuzz targets load the spec
// from KVFUZZ_ENGINE, and the finding is shrunk and filed under a file-safe name. A
// plugin (the built-in mask-origin, exported through the C ABI) and a process (the Python
// example whose reset keeps the position counter).
struct DoorCase {
  std::string name;
  std::string spec;
  std::string filed_prefix;
  Property property;
};

class CampaignThroughADoor : public ::testing::TestWithParam<DoorCase> {};

TEST_P(CampaignThroughADoor, FilesOneShrunkFixture) {
  const DoorCase& c = GetParam();
  const fs::path dir = fresh_dir(c.name);
  const test::CommandResult r = run_kvfuzz("campaign --engine '" + c.spec + "' --targets " +
                                           std::string(property_name(c.property)) + " --time 10s" +
                                           common_flags(dir, kTruncateAndReset));
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  const std::vector<fs::path> filed = json_files(dir / "regressions");
  ASSERT_EQ(filed.size(), 1u) << r.out << r.err;
  EXPECT_TRUE(filed[0].filename().string().starts_with(c.filed_prefix)) << filed[0];
  const Scenario shrunk = load_fixture(filed[0]);
  EXPECT_EQ(shrunk.provenance.engine, c.spec);
  EXPECT_LE(program_tokens(shrunk), 4) << test::slurp(filed[0]);
  EXPECT_TRUE(judge_property(c.property, shrunk, *find_engine("contiguous")).pass);
}

INSTANTIATE_TEST_SUITE_P(
    Doors, CampaignThroughADoor,
    ::testing::Values(DoorCase{"plugin",
                               std::string("plugin:") + KVFUZZ_BUILTIN_PLUGIN + ":mask-origin",
                               "plugin-libkvfuzz_builtin_engines.so-mask-origin-prefix-mismatch-",
                               Property::prefix},
                      DoorCase{"exec",
                               std::string("exec:python3 ") + KVFUZZ_SOURCE_DIR +
                                   "/examples/python-engine/buggy_engine.py",
                               "exec-buggy_engine.py-prefix-wrong-position-", Property::prefix}),
    [](const auto& info) { return info.param.name; });

class MisbehavingEngine : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(MisbehavingEngine, IsAFindingAndTheCampaignGoesOn) {
  const auto& [engine, kind] = GetParam();
  const fs::path dir = fresh_dir(engine);
  // A hang's shrink candidates each wait out the input timeout: 20 s per signature took
  // the test to 140 s under ASan, and no size is promised for it (below).
  const int shrink_seconds = kind == "timeout" ? 5 : 20;
  const test::CommandResult r =
      run_kvfuzz("campaign --engine " + engine + " --targets prefix,batch --time 20s --slice 8s " +
                 "--input-timeout 2" + common_flags(dir, kTruncateAndReset, shrink_seconds));
  ASSERT_EQ(r.status, 1) << r.out << r.err;
  const CampaignRecord record = load_campaign(dir / "run" / "campaign.json");
  EXPECT_TRUE(record.finished);
  EXPECT_GE(record.elapsed_seconds, 16);  // both targets had their turn
  std::set<std::string> targets_sampled;
  for (const CampaignSample& s : record.samples) targets_sampled.insert(s.target);
  EXPECT_EQ(targets_sampled, (std::set<std::string>{"fuzz_prefix", "fuzz_batch"}));
  ASSERT_FALSE(record.findings.empty());
  const CampaignFinding& first = record.findings[0];
  EXPECT_EQ(first.kind, kind);
  EXPECT_EQ(first.signature, kind + " in " + first.target);
  // The input became a fixture (decoded without running the engine), shrunk with the target
  // as the judge: it still holds the truncate that misbehaves, and little else.
  ASSERT_FALSE(first.fixture.empty()) << first.note;
  EXPECT_TRUE(first.note.empty()) << first.note;
  EXPECT_LE(first.tokens_after, first.tokens_before);
  const Scenario scenario = load_fixture(first.fixture);
  EXPECT_EQ(scenario.provenance.source, "shrink");
  bool truncates = false;
  for (const Op& op : scenario.program) truncates |= op.kind == OpKind::truncate;
  EXPECT_TRUE(truncates);
  // A crash costs a process start per candidate, a hang its timeout too: only the crash
  // gets far enough within the test's budget to promise a size.
  if (kind == "crash") {
    EXPECT_LE(scenario.program.size(), 3u);
  }
  // Filed apart from the property failures, once per signature.
  EXPECT_TRUE(json_files(dir / "regressions").empty());
  std::set<std::string> signatures;
  for (const CampaignFinding& f : record.findings) signatures.insert(f.signature);
  const std::vector<fs::path> filed = json_files(dir / "regressions" / "crashes");
  EXPECT_EQ(filed.size(), signatures.size());
  EXPECT_TRUE(fs::exists(first.filed)) << first.filed;
  EXPECT_TRUE(fs::path(first.filed).filename().string().starts_with(engine + "-" + kind + "-"));
}

INSTANTIATE_TEST_SUITE_P(
    Selftest, MisbehavingEngine,
    ::testing::Values(std::pair{std::string("selftest-crash"), std::string("crash")},
                      std::pair{std::string("selftest-hang"), std::string("timeout")}),
    [](const auto& info) { return info.param.second; });

TEST(Campaign, CtrlCStopsWithTheRecordSavedAndTheSameCommandResumes) {
  const fs::path dir = fresh_dir("stop");
  const std::string flags =
      " --engine paged --targets prefix,layout" + common_flags(dir, kTruncateAndReset);
  std::vector<std::string> argv = {KVFUZZ_BINARY, "campaign", "--time", "10m"};
  {
    std::string word;
    for (char c : flags + " ") {
      if (c == ' ') {
        if (!word.empty()) argv.push_back(word);
        word.clear();
      } else {
        word += c;
      }
    }
  }
  Subprocess process(argv, {});
  std::string output;
  const auto start = std::chrono::steady_clock::now();
  bool interrupted = false;
  while (process.poll_lines(std::chrono::milliseconds(100),
                            [&](const std::string& line) { output += line + "\n"; })) {
    // Once a fork-mode job has finished, its inputs are in the campaign's corpus; then
    // Ctrl-C. Coverage in the progress line alone can come before the first job's inputs
    // are merged (a loaded machine, under ASan, showed that), so wait for the files too.
    const fs::path corpus = dir / "run" / "corpus" / "fuzz_prefix";
    if (!interrupted && std::regex_search(output, std::regex(" cov [1-9]")) &&
        fs::is_directory(corpus) && !fs::is_empty(corpus)) {
      interrupted = true;
      process.interrupt();
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(180)) << output;
  }
  const ProcessResult result = process.wait();
  EXPECT_EQ(result.exit_code, 0) << output;
  EXPECT_NE(output.find("stopping"), std::string::npos) << output;
  EXPECT_NE(output.find("resume with the same command"), std::string::npos) << output;
  CampaignRecord record = load_campaign(dir / "run" / "campaign.json");
  EXPECT_FALSE(record.finished);
  EXPECT_GT(record.elapsed_seconds, 1);
  EXPECT_LT(record.elapsed_seconds, 180);
  EXPECT_TRUE(fs::exists(dir / "run" / "report.html"));
  EXPECT_FALSE(fs::is_empty(dir / "run" / "corpus" / "fuzz_prefix"));  // nothing lost

  const double stopped_at = record.elapsed_seconds;
  const test::CommandResult resumed = run_kvfuzz(
      "campaign --time " + std::to_string(static_cast<int>(stopped_at) + 8) + "s" + flags);
  EXPECT_EQ(resumed.status, 0) << resumed.out << resumed.err;
  record = load_campaign(dir / "run" / "campaign.json");
  EXPECT_TRUE(record.finished);
  EXPECT_GT(record.elapsed_seconds, stopped_at + 4);
  EXPECT_GT(record.corpora[0].inputs_after, 0);  // merged
}

TEST(Campaign, BadInputIsOneLineAndStatus2) {
  const fs::path dir = fresh_dir("bad");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--engine nope", "--engine: unknown engine 'nope'"},
      {"--engine paged --time soon", "--time: expected a duration"},
      {"--engine paged --jobs 0", "--jobs: expected at least 1"},
      {"--engine paged --targets prefix,nope", "--targets: unknown target 'nope'"},
      {"--engine paged --fuzzers /nonexistent", "--fuzzers: no fuzz target /nonexistent/fuzz_"},
      {"--engine paged --sanitize --fuzzers /nonexistent", "--sanitize: picks the sanitize build"},
      {"--engine paged --time 8h --dict 'a b.dict'", "--dict: 'a b.dict' has a space"},
  };
  for (const Case& c : cases) {
    const test::CommandResult r =
        run_kvfuzz("campaign " + c.args + " --out " + (dir / "run").string());
    EXPECT_EQ(r.status, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // A campaign directory belongs to one engine.
  CampaignRecord record;
  record.engine = "flash";
  record.targets = {"fuzz_prefix"};
  save_campaign(record, dir / "other" / "campaign.json");
  const test::CommandResult r =
      run_kvfuzz("campaign --engine paged --out " + (dir / "other").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("this campaign fuzzes 'flash', not 'paged'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvfuzz
