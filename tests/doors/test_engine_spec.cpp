// --engine specs (kvfuzz/engine_spec.h) and what every door shares: built-in names resolve
// to the registry's engines, bad specs fail with one line naming what was expected,
// engine names become safe file names, capabilities are probed and checked against
// programs. The plugin and exec doors themselves: test_plugin, test_exec.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "corpus/fixture_names.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_spec.h"

namespace kvfuzz {
namespace {

std::string spec_error(const std::string& spec) {
  try {
    resolve_engine(spec);
  } catch (const EngineSpecError& e) {
    return e.what();
  }
  return "";
}

TEST(EngineSpec, BuiltInNamesResolveToTheRegistrysEngines) {
  for (const EngineInfo& info : engine_registry()) {
    const std::shared_ptr<const EngineInfo> resolved = resolve_engine(info.name);
    ASSERT_NE(resolved, nullptr);
    EXPECT_EQ(resolved.get(), &info) << info.name;
  }
}

TEST(EngineSpec, BadSpecsSayWhatWasExpected) {
  const std::string unknown = spec_error("no-such-engine");
  EXPECT_NE(unknown.find("unknown engine 'no-such-engine'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("contiguous"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("plugin:PATH[:NAME] or exec:COMMAND"), std::string::npos) << unknown;
  // A typo within two edits of a name is named; a name far from every one is not.
  EXPECT_EQ(unknown.find("did you mean"), std::string::npos) << unknown;
  EXPECT_NE(spec_error("flsh").find("unknown engine 'flsh' (did you mean 'flash'?); expected"),
            std::string::npos);
  EXPECT_NE(spec_error("pagd").find("(did you mean 'paged'?)"), std::string::npos);
  EXPECT_EQ(did_you_mean("contiguous-f16acc"), " (did you mean 'contiguous-f16acc'?)");
  EXPECT_EQ(did_you_mean("stale_kv"), " (did you mean 'stale-kv'?)");
  EXPECT_EQ(did_you_mean("quantum"), "");
  EXPECT_NE(spec_error("plugin:").find("expected plugin:PATH[:NAME]"), std::string::npos);
  EXPECT_NE(spec_error("exec:   ").find("expected exec:COMMAND"), std::string::npos);
  EXPECT_NE(spec_error("plugin:/no/such/lib.so:x").find("/no/such/lib.so"), std::string::npos);
  EXPECT_EQ(spec_error("").empty(), false);
  for (const std::string spec : {"no-such-engine", "plugin:", "exec:", "plugin:/no/such.so"}) {
    EXPECT_EQ(spec_error(spec).find('\n'), std::string::npos) << "one line: " << spec;
  }
}

// Where a list is cut (kvfuzz/engine_spec.h): names at every comma; a plugin: or exec:
// spec only at a comma that starts another spec, so its own commas stay in it.
TEST(EngineSpec, ListsAreCutWhereAnotherSpecStarts) {
  using List = std::vector<std::string>;
  EXPECT_EQ(split_engine_list("paged"), (List{"paged"}));
  EXPECT_EQ(split_engine_list("paged,flsh,,x"), (List{"paged", "flsh", "", "x"}));
  EXPECT_EQ(split_engine_list("plugin:a.so,plugin:b.so:eng"),
            (List{"plugin:a.so", "plugin:b.so:eng"}));
  EXPECT_EQ(split_engine_list("plugin:a,b.so,exec:./e --dims 1,2,paged,all"),
            (List{"plugin:a,b.so", "exec:./e --dims 1,2", "paged", "all"}));
  EXPECT_EQ(split_engine_list("exec:./e --to paged2,x"), (List{"exec:./e --to paged2,x"}));
  EXPECT_EQ(split_engine_list("exec:./e a,paged-ish"), (List{"exec:./e a,paged-ish"}));
  EXPECT_EQ(split_engine_list("mask-origin,exec:./e,mutants"),
            (List{"mask-origin", "exec:./e", "mutants"}));
  EXPECT_EQ(split_engine_list(""), (List{""}));
}

TEST(EngineSpec, ListsResolveEachEngineOnceInOrder) {
  std::vector<std::string> names;
  for (const auto& engine : resolve_engines("flash,all,mask-origin,paged")) {
    names.push_back(engine->name);
  }
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names[0], "flash");
  EXPECT_EQ(names[1], "contiguous");
  EXPECT_EQ(names.back(), "mask-origin");
  EXPECT_EQ(std::count(names.begin(), names.end(), "paged"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "flash"), 1);
  size_t every = 0, mutants = 0;
  for (const EngineInfo& info : engine_registry()) {
    ++every;
    mutants += info.mutant ? 1 : 0;
  }
  EXPECT_EQ(resolve_engines("every").size(), every);
  EXPECT_EQ(resolve_engines("mutants,mask-origin").size(), mutants);
  for (const char* bad : {"paged,flsh", "paged,", ",paged", "paged,plugin:"}) {
    EXPECT_THROW(resolve_engines(bad), EngineSpecError) << bad;
  }
  try {
    resolve_engines("paged,flsh");
  } catch (const EngineSpecError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown engine 'flsh' (did you mean 'flash'?)"),
              std::string::npos)
        << e.what();
  }
}

TEST(EngineSpec, FileSafeNamesKeepTheTellingEnd) {
  EXPECT_EQ(file_safe_name("mask-origin"), "mask-origin");
  EXPECT_EQ(file_safe_name("plugin:/x/libe.so:bug"), "plugin-libe.so-bug");
  EXPECT_EQ(file_safe_name("plugin:libe.so"), "plugin-libe.so");
  EXPECT_EQ(file_safe_name("exec:python3 examples/python-engine/buggy_engine.py"),
            "exec-buggy_engine.py");
  EXPECT_EQ(file_safe_name("exec:./my engine --fast"), "exec-my-engine-fast");
  EXPECT_EQ(file_safe_name("::"), "engine");
  EXPECT_EQ(file_safe_name("../../etc/passwd"), "etc-passwd");
  const std::string long_name = file_safe_name("plugin:/lib/" + std::string(200, 'a') + ".so:tail");
  EXPECT_LE(long_name.size(), 60u);
  EXPECT_TRUE(long_name.ends_with("aaa.so-tail")) << long_name;
  for (const char c : file_safe_name("a b/c\\d:e\"f*g?h<i>j|k")) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')
        << c;
  }
}

TEST(FixtureNames, TheSameCaseGetsTheSameNameWhateverItsNameNoteAndProvenance) {
  Scenario s;
  s.tokens = GeneratedTokens{7, 3, Distribution::small_int, false};
  s.program = {Op::append(0, {0, 1}), Op::append(0, {2})};
  const std::string stem = failure_fixture_stem("plugin:/x/libe.so:bug", Property::reset,
                                                FailureKind::wrong_position, s);
  EXPECT_TRUE(stem.starts_with("plugin-libe.so-bug-reset-wrong-position-")) << stem;
  const std::string hash = stem.substr(stem.rfind('-') + 1);
  EXPECT_EQ(hash.size(), 8u);
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos) << hash;
  EXPECT_EQ(scenario_hash(s), hash);
  Scenario renamed = s;
  renamed.name = "other";
  renamed.note = "a note";
  renamed.provenance.engine = "contiguous";
  EXPECT_EQ(scenario_hash(renamed), hash);
  Scenario changed = s;
  changed.program.push_back(Op::reset(0));
  EXPECT_NE(scenario_hash(changed), hash);
}

TEST(EngineSpec, ProbedCapabilitiesAreTheEnginesOwn) {
  for (const EngineInfo& info : engine_registry()) {
    const EngineCapabilities can = probe_capabilities(info);
    EXPECT_TRUE(can.truncate) << info.name;  // every built-in engine announces both
    EXPECT_TRUE(can.fork) << info.name;
  }
  // An engine that announces nothing, and one that cannot even be made.
  struct Plain : Engine {
    void step(std::span<const ChunkIn>, std::span<ChunkOut>) override {}
    void reset(int) override {}
  };
  const EngineInfo plain{"plain", "", false,
                         [](const EngineConfig&) { return std::make_unique<Plain>(); }};
  EXPECT_FALSE(probe_capabilities(plain).truncate);
  EXPECT_FALSE(probe_capabilities(plain).fork);
  const EngineInfo broken{"broken", "", false, [](const EngineConfig&) -> std::unique_ptr<Engine> {
                            throw std::runtime_error("no GPU");
                          }};
  try {
    probe_capabilities(broken);
    ADD_FAILURE() << "expected an EngineError";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("broken cannot be made"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
  }
}

TEST(EngineSpec, UnsupportedOperationNamesTheFirstOneMissing) {
  Scenario s;
  s.sequences = 2;
  s.program = {Op::append(0, {0}), Op::fork(0, 1), Op::truncate(0, 0)};
  EXPECT_EQ(unsupported_operation(s, {.truncate = true, .fork = true}), std::nullopt);
  EXPECT_EQ(unsupported_operation(s, {.truncate = true, .fork = false}), "fork");
  EXPECT_EQ(unsupported_operation(s, {.truncate = false, .fork = true}), "truncate");
  s.program = {Op::append(0, {0}), Op::reset(0)};
  EXPECT_EQ(unsupported_operation(s, {}), std::nullopt);
}

}  // namespace
}  // namespace kvfuzz
