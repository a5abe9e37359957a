// The kvfuzz command with whole-model engines: check generates model scenarios for them
// without --model (forked workers), refuses to mix them with attention engines unless
// --model says so, saves a mutant's finding that replay, explain and shrink then take;
// list shows them apart and says what they are.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "command.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;
using test::run_kvfuzz;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ModelCli, CheckReplayExplainAndShrinkAWholeModelMutant) {
  const fs::path out = fs::path(testing::TempDir()) / "model-cli";
  fs::remove_all(out);
  const auto check = run_kvfuzz(
      "check --engine model-cached,model-truncate-keeps-one --cases 12 "
      "--jobs 2 --out " +
      out.string());
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_TRUE(has(check.out, "ok   pass")) << check.out;
  EXPECT_TRUE(has(check.out, "ok   rejected at case")) << check.out;
  fs::path fixture;
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.path().extension() == ".json") fixture = entry.path();
  }
  ASSERT_FALSE(fixture.empty()) << "check saved no fixture";

  const auto replay =
      run_kvfuzz("replay " + fixture.string() + " --engine model-truncate-keeps-one,model-cached");
  EXPECT_EQ(replay.status, 1) << replay.out << replay.err;  // the mutant fails it again
  EXPECT_EQ(run_kvfuzz("replay " + fixture.string() + " --engine model-cached").status, 0);

  const auto explain =
      run_kvfuzz("explain " + fixture.string() + " --engine model-truncate-keeps-one");
  EXPECT_TRUE(has(explain.out, "layers: not located")) << explain.out;

  const auto shrink =
      run_kvfuzz("shrink " + fixture.string() +
                 " --engine model-truncate-keeps-one --time 30 --out " + (out / "shrunk").string());
  EXPECT_EQ(shrink.status, 1) << shrink.out << shrink.err;
  EXPECT_TRUE(has(shrink.out, "model-truncate-keeps-one fails prefix/")) << shrink.out;
  fs::remove_all(out);
}

TEST(ModelCli, AttentionAndWholeModelEnginesMixOnlyAtModelLevel) {
  const auto mixed = run_kvfuzz("check --engine model-cached,paged --cases 2");
  EXPECT_EQ(mixed.status, 2);
  EXPECT_TRUE(has(mixed.err, "model-cached run whole models only")) << mixed.err;
  EXPECT_TRUE(has(mixed.err, "add --model")) << mixed.err;
  const fs::path out = fs::path(testing::TempDir()) / "model-cli-mixed";
  const auto model = run_kvfuzz(
      "check --model --engine model-cached,paged --cases 1 --seed 2 --out " + out.string());
  EXPECT_EQ(model.status, 0) << model.out << model.err;
  // Both ran, each on its one case (seed 2's first has 130 rows; seed 1's three cases took
  // 34 s under ASan).
  EXPECT_TRUE(has(model.out, "model-cached ")) << model.out;
  EXPECT_TRUE(has(model.out, "paged ")) << model.out;
  fs::remove_all(out);
}

TEST(ModelCli, ListShowsThemApart) {
  const auto list = run_kvfuzz("list");
  const size_t apart = list.out.find("whole-model engines");
  ASSERT_NE(apart, std::string::npos) << list.out;
  EXPECT_GT(list.out.find("model-cached "), apart);
  EXPECT_GT(list.out.find("model-truncate-keeps-one"), apart);
  const auto declared = run_kvfuzz("list --engine model-cached-f16");
  EXPECT_TRUE(has(declared.out, "runs          whole models")) << declared.out;
  EXPECT_TRUE(has(declared.out, "P rounded to f16")) << declared.out;
  // A typo is still answered with the closest name, whole-model engines included.
  EXPECT_TRUE(has(run_kvfuzz("list --engine model-cahced").err, "did you mean 'model-cached'"));
}

}  // namespace
}  // namespace kvfuzz
