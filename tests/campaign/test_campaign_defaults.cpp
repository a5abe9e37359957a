// Where `kvfuzz campaign` finds its fuzz targets, seeds and dictionary unless told
// (campaign/campaign_defaults.h): next to an installed kvfuzz the installed ones, from the
// build tree the build's and the checkout's, never relative to the working directory; the
// coverage-only targets by default, the sanitized ones for --sanitize.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "campaign/campaign_defaults.h"
#include "campaign/campaign_loop.h"

namespace kvfuzz::campaign {
namespace {

namespace fs = std::filesystem;

const CampaignLayout kLayout{"../libexec/kvfuzz", "../share/kvfuzz", "/build/fuzz/fuzzers",
                             "/checkout", "/build/sanitize/fuzzers"};

fs::path fresh_prefix(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvfuzz-campaign-defaults-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  return dir;
}

TEST(CampaignDefaults, AnInstalledKvfuzzTakesTheInstalledTargetsCorpusAndDictionary) {
  const fs::path prefix = fresh_prefix("installed");
  fs::create_directories(prefix / "share" / "kvfuzz" / "corpus");
  const CampaignDefaults d = campaign_defaults(prefix / "bin" / "kvfuzz", kLayout);
  EXPECT_TRUE(d.installed);
  EXPECT_EQ(d.fuzzers, (prefix / "libexec" / "kvfuzz").string());
  // Those of the build that was installed, for --sanitize as well.
  EXPECT_EQ(d.sanitized_fuzzers, d.fuzzers);
  EXPECT_EQ(d.seeds, (prefix / "share" / "kvfuzz" / "corpus").string());
  EXPECT_EQ(d.dict, (prefix / "share" / "kvfuzz" / "fixture.dict").string());
  fs::remove_all(prefix);
}

TEST(CampaignDefaults, TheBuildTreesKvfuzzTakesTheBuildsTargetsAndTheCheckoutsFiles) {
  const fs::path prefix = fresh_prefix("build");  // no share/kvfuzz/corpus beside it
  const CampaignDefaults d = campaign_defaults(prefix / "bin" / "kvfuzz", kLayout);
  EXPECT_FALSE(d.installed);
  // Coverage-only targets by default; the sanitized ones for --sanitize.
  EXPECT_EQ(d.fuzzers, "/build/fuzz/fuzzers");
  EXPECT_EQ(d.sanitized_fuzzers, "/build/sanitize/fuzzers");
  EXPECT_EQ(d.seeds, "/checkout/corpus");
  EXPECT_EQ(d.dict, "/checkout/fuzzers/fixture.dict");
  fs::remove_all(prefix);
}

TEST(CampaignDefaults, ThisBuildsLayoutIsAbsoluteWhereItIsNotRelativeToTheExecutable) {
  const CampaignLayout layout = built_layout();
  EXPECT_TRUE(layout.build_fuzzers.is_absolute());
  EXPECT_TRUE(layout.build_sanitized_fuzzers.is_absolute());
  EXPECT_NE(layout.build_fuzzers, layout.build_sanitized_fuzzers);
  EXPECT_TRUE(layout.source.is_absolute());
  EXPECT_TRUE(layout.installed_data.is_relative());
  EXPECT_TRUE(layout.installed_fuzzers.is_relative());
  const CampaignDefaults d = campaign_defaults();  // the test binary is in no install
  EXPECT_FALSE(d.installed);
  EXPECT_TRUE(fs::is_directory(d.seeds)) << d.seeds;
  EXPECT_TRUE(fs::is_regular_file(d.dict)) << d.dict;
}

// A missing target names the build that makes the kind asked for.
TEST(CampaignDefaults, AMissingTargetSaysWhichBuildMakesIt) {
  EXPECT_NE(how_to_build_fuzzers(false).find("scripts/build.sh fuzz"), std::string::npos);
  EXPECT_NE(how_to_build_fuzzers(false).find("--sanitize"), std::string::npos);
  EXPECT_NE(how_to_build_fuzzers(true).find("scripts/build.sh sanitize"), std::string::npos);
  const fs::path out = fresh_prefix("missing");
  CampaignOptions options;
  options.engine = "paged";
  options.out = (out / "run").string();
  options.fuzzers = (out / "no-fuzzers").string();
  options.fuzzers_hint = how_to_build_fuzzers(false);
  try {
    run_campaign(options, {[](const std::string&) {}, {}});
    ADD_FAILURE() << "a campaign without targets started";
  } catch (const CampaignSetupError& e) {
    const std::string line = e.what();
    EXPECT_NE(line.find("--fuzzers: no fuzz target " + options.fuzzers + "/fuzz_prefix"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find(options.fuzzers_hint), std::string::npos) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace kvfuzz::campaign
