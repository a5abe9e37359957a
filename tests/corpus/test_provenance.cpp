// What the tools that write failing fixtures share (corpus/): the names they give them
// (fixture_names.h), the provenance they stamp (provenance.h) and how fixtures are found
// on disk (fixture_files.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "corpus/fixture_files.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "judge/report.h"
#include "kvfuzz/fixture_io.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;

Scenario small_case() {
  Scenario s;
  s.tokens = GeneratedTokens{7, 3, Distribution::small_int, false};
  s.program = {Op::append(0, {0, 1}), Op::append(0, {2})};
  return s;
}

TEST(FixtureStems, EachKindOfNameAsTheToolsWriteIt) {
  EXPECT_EQ(check_fixture_stem("mask-origin", 16834447057089888969ull),
            "check-mask-origin-16834447057089888969");
  EXPECT_EQ(check_fixture_stem("exec:python3 engines/mine.py", 3), "check-exec-mine.py-3");
  EXPECT_EQ(suite_fixture_stem(Property::batch, "paged"), "prop-batch-paged");
  EXPECT_EQ(fuzz_fixture_stem("0123456789abcdef0123456789abcdef01234567"),
            "crash-0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(decoded_fixture_stem("fuzz_prefix", "timeout-0123abcd"),
            "fuzz_prefix-timeout-0123abcd");
  EXPECT_EQ(crash_fixture_prefix("exec:./e.py", "oom", "fuzz_reset"), "exec-e.py-oom-fuzz_reset-");
  EXPECT_EQ(crash_fixture_stem("stale-kv", "crash", "fuzz_prefix",
                               "fuzz_prefix/crash-89abcdef0123456789abcdef0123456789abcdef"),
            "stale-kv-crash-fuzz_prefix-89abcdef");
}

TEST(FixtureStems, AFailureStemBeginsWithItsSignaturesPrefix) {
  const Scenario s = small_case();
  const std::string prefix =
      failure_fixture_prefix("mask-origin", Property::reset, FailureKind::wrong_position);
  EXPECT_EQ(prefix, "mask-origin-reset-wrong-position-");
  EXPECT_EQ(failure_fixture_stem("mask-origin", Property::reset, FailureKind::wrong_position, s),
            prefix + scenario_hash(s));
}

TEST(Provenance, StampNamesTheFindingAndKeepsTheRest) {
  Scenario s = small_case();
  s.provenance.seed = 42;
  Divergence d;
  d.kind = FailureKind::mismatch;
  d.key = RowKey{0, 0, 3};
  d.detail = "two\nlines";
  const std::string line = failure_line(d);
  EXPECT_EQ(line, describe_divergence(d).substr(0, describe_divergence(d).find('\n')));
  EXPECT_EQ(line.find('\n'), std::string::npos);

  stamp_failure(s, "check", "paged", std::nullopt, line);
  EXPECT_EQ(s.provenance.source, "check");
  EXPECT_EQ(s.provenance.engine, "paged");
  EXPECT_FALSE(s.provenance.property.has_value());
  EXPECT_EQ(s.provenance.seed, 42u);
  EXPECT_EQ(s.provenance.failure, line);
  EXPECT_TRUE(s.provenance.kvfuzz_version.has_value());

  stamp_failure(s, "shrink", "flash", Property::layout, "x");
  EXPECT_EQ(s.provenance.property, "layout");
  EXPECT_EQ(s.provenance.seed, 42u);
  EXPECT_EQ(recorded_property(s), Property::layout);
}

TEST(Provenance, FailureLineOfAnOutcomeWithoutARowIsItsReportsFirstLine) {
  PropertyOutcome outcome;
  outcome.pass = false;
  outcome.report = "first\nsecond\n";
  EXPECT_EQ(failure_line(outcome), "first");
  outcome.first = Divergence{};
  EXPECT_EQ(failure_line(outcome), failure_line(*outcome.first));
}

TEST(Provenance, RecordedPropertyIsPrefixWhenNoneOrUnknown) {
  Scenario s;
  EXPECT_EQ(recorded_property(s), Property::prefix);
  s.provenance.property = "no-such-property";
  EXPECT_EQ(recorded_property(s), Property::prefix);
  s.provenance.property = "batch";
  EXPECT_EQ(recorded_property(s), Property::batch);
}

TEST(FixtureFiles, EveryJsonBelowADirectorySorted) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("kvfuzz-fixture-files-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(dir);
  fs::create_directories(dir / "b" / "deeper");
  fs::create_directories(dir / "a");
  for (const char* name : {"b/deeper/z.json", "b/y.json", "a/x.json", "c.json", "notes.txt"}) {
    std::ofstream(dir / name) << "{}";
  }
  fs::create_directories(dir / "d.json");  // a directory is not a fixture
  EXPECT_EQ(fixtures_below(dir), (std::vector<fs::path>{dir / "a/x.json", dir / "b/deeper/z.json",
                                                        dir / "b/y.json", dir / "c.json"}));
  EXPECT_THROW(fixtures_below(dir / "missing"), FixtureError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvfuzz
