// The model door of C++ plugins (kvfuzz/engine_plugin.h): the built-in whole-model engines
// exported as a plugin come back as whole-model engines (make_model, no attention factory),
// judged exactly as the linked-in ones, their mutant rejected; kvfuzz check runs them in
// forked workers and names the plugin in the reproduction command.
#include <gtest/gtest.h>

#include <string>

#include "command.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_plugin.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/generator.h"
#include "model/model_check.h"
#include "spec_error.h"

namespace kvfuzz {
namespace {

std::string spec(const std::string& name) {
  return std::string("plugin:") + KVFUZZ_MODEL_PLUGIN + ":" + name;
}

Scenario generated(uint64_t seed) {
  GeneratorOptions o;
  o.model = ModelOptions{};
  o.max_epoch_tokens = 32;
  o.typical_epoch_tokens = 16;
  o.max_head_dim = 8;
  o.typical_head_dim = 4;
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, o);
}

TEST(ModelPlugin, CarriesWholeModelEnginesThroughTheModelDoor) {
  for (const EngineInfo& builtin : model_engine_registry()) {
    const auto plugin = resolve_engine(spec(builtin.name));
    SCOPED_TRACE(builtin.name);
    EXPECT_TRUE(plugin->make_model);
    EXPECT_FALSE(plugin->make);  // whole models only
    EXPECT_EQ(plugin->mutant, builtin.mutant);
    const EngineDeclarations got = probe_declarations(*plugin);
    const EngineDeclarations want = probe_declarations(builtin);
    EXPECT_TRUE(got.whole_model);
    EXPECT_EQ(got.numerics, want.numerics);
    EXPECT_EQ(got.supports, want.supports);
    EXPECT_EQ(got.capabilities.truncate, want.capabilities.truncate);
    EXPECT_EQ(got.capabilities.fork, want.capabilities.fork);
  }
}

TEST(ModelPlugin, JudgedExactlyAsTheLinkedInEngines) {
  int rejected = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const Scenario s = generated(seed);
    for (const char* name : {"model-cached", "model-truncate-keeps-one"}) {
      const ModelVerdict linked = judge_model(s, *find_engine(name));
      const ModelVerdict plugin = judge_model(s, *resolve_engine(spec(name)));
      EXPECT_EQ(plugin.pass, linked.pass) << name << " seed " << seed;
      EXPECT_EQ(plugin.worst_logits_ratio, linked.worst_logits_ratio) << name << " seed " << seed;
      if (std::string(name) == "model-cached") {
        EXPECT_TRUE(plugin.pass) << describe_model_divergence(plugin);
      }
      if (!plugin.pass) ++rejected;
    }
  }
  EXPECT_GE(rejected, 2);  // the mutant is exercised, and rejected through the door too
}

// A user's ModelEngine class built with kvfuzz_add_engine_plugin(... MODEL): the generated
// glue opens the model door. The class is model-cached, so it must give the same logits.
TEST(ModelPlugin, TheGeneratedGlueCarriesAUsersModelEngineClass) {
  const auto plugin = resolve_engine(std::string("plugin:") + KVFUZZ_TINY_MODEL_PLUGIN);
  ASSERT_TRUE(plugin->make_model);
  EXPECT_FALSE(plugin->make);
  EXPECT_TRUE(probe_declarations(*plugin).whole_model);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Scenario s = generated(seed);
    const ModelVerdict v = judge_model(s, *plugin);
    EXPECT_TRUE(v.pass) << describe_model_divergence(v);
    EXPECT_EQ(v.worst_logits_ratio,
              judge_model(s, *find_engine("model-cached")).worst_logits_ratio);
  }
}

TEST(ModelPlugin, AnAttentionScenarioIsSkippedForIt) {
  // The C table names the engine (so plugin:PATH:NAME resolves); no attention engine can be
  // made of it, and replay says why it skips an attention fixture.
  const auto plugin = resolve_engine(spec("model-cached"));
  EXPECT_FALSE(plugin->make);
  const auto result =
      test::run_kvfuzz("replay " + std::string(KVFUZZ_SOURCE_DIR) +
                       "/corpus/seeds/worked-example.json --engine " + spec("model-cached"));
  EXPECT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("is an attention scenario, and the engine runs whole models only"),
            std::string::npos)
      << result.out;
}

using test::spec_error;

TEST(ModelPlugin, AWrongDoorIsRefusedWithOneLine) {
  const std::string version = std::string("plugin:") + KVFUZZ_BAD_DOOR_VERSION;
  EXPECT_EQ(spec_error(version),
            "--engine " + version + ": kvfuzz_model_door() returned version 99 (struct size " +
                std::to_string(sizeof(ModelDoor)) + "); expected version 1 (struct size " +
                std::to_string(sizeof(ModelDoor)) + "): rebuild the plugin against this kvfuzz");
  const std::string unlisted = std::string("plugin:") + KVFUZZ_BAD_DOOR_UNLISTED;
  EXPECT_EQ(spec_error(unlisted),
            "--engine " + unlisted +
                ": the model door names engine 'not-in-the-table', which the plugin's table "
                "does not; expected every model engine in the table");
}

TEST(ModelPlugin, CheckRunsThemInForkedWorkers) {
  const auto result = test::run_kvfuzz(
      "check --engine " + spec("model-cached") + "," + spec("model-truncate-keeps-one") +
      " --cases 12 --jobs 2 --out " + testing::TempDir() + "/model-plugin-check");
  EXPECT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("ok   pass"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok   rejected at case"), std::string::npos) << result.out;
}

}  // namespace
}  // namespace kvfuzz
