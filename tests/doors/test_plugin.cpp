// The C ABI plugin door (kvfuzz/engine_abi.h, plugin:PATH[:NAME]): the built-in engines
// exported by plugins/builtin behave through it exactly as linked in (the same rows, bit
// for bit; every mutant rejected the same way); every broken plugin of tests/doors/plugins is
// refused at load with one line naming the defect, or becomes an engine error naming the
// call; and the kvfuzz command takes plugin engines in check, shrink and replay.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "command.h"
#include "corpus/fixture_names.h"
#include "declarations_away.h"
#include "generated_cases.h"
#include "judge/report.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine_abi.h"
#include "kvfuzz/engine_spec.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/property.h"
#include "run/runner.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;

const std::string kBuiltin = KVFUZZ_BUILTIN_PLUGIN;
const std::string kMisbehaving = KVFUZZ_PLUGIN_MISBEHAVING;
const std::string kShifting = KVFUZZ_PLUGIN_SHIFTING;
const fs::path kSeeds = fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds";

std::shared_ptr<const EngineInfo> builtin_plugin(const std::string& name) {
  return resolve_engine("plugin:" + kBuiltin + ":" + name);
}

std::string spec_error(const std::string& spec) {
  try {
    resolve_engine(spec);
  } catch (const EngineSpecError& e) {
    return e.what();
  }
  return "(no EngineSpecError)";
}

Scenario seed(const std::string& name) {
  return load_fixture(kSeeds / (name + ".json"));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------------------
// The built-in engines through the plugin

void expect_same_declarations(const EngineDeclarations& got, const EngineDeclarations& want) {
  EXPECT_EQ(got.capabilities.truncate, want.capabilities.truncate);
  EXPECT_EQ(got.capabilities.fork, want.capabilities.fork);
  EXPECT_EQ(got.bitwise, want.bitwise);
  EXPECT_EQ(got.numerics, want.numerics);
  EXPECT_EQ(got.supports, want.supports);
}

// Every declaration as the linked-in engine makes it, whatever the engines declare.
TEST(BuiltinPlugin, ExportsEveryRegistryEngineWithItsFlagAndDeclarations) {
  bool some_claim = false;
  for (const EngineInfo& engine : engine_registry()) {
    SCOPED_TRACE(engine.name);
    const std::string spec = "plugin:" + kBuiltin + ":" + engine.name;
    const auto plugin = resolve_engine(spec);
    EXPECT_EQ(plugin->name, spec);
    EXPECT_EQ(plugin->description, engine.description);
    EXPECT_EQ(plugin->mutant, engine.mutant);
    const EngineDeclarations want = probe_declarations(engine);
    expect_same_declarations(probe_declarations(*plugin), want);
    some_claim = some_claim || want.bitwise != BitwiseClaims{};
  }
  EXPECT_TRUE(some_claim) << "no built-in engine claims anything: the bitwise flags go untested";
}

TEST(BuiltinPlugin, ExportsNothingButTheEntryPoint) {
  void* handle = dlopen(kBuiltin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  EXPECT_NE(dlsym(handle, KVFUZZ_ENGINE_PLUGIN_SYMBOL), nullptr);
  // Its copy of the engines stays private: kvfuzz::engine_registry() and probe_capabilities
  // are linked into both this test and the plugin, and must not bind across.
  EXPECT_EQ(dlsym(handle, "_ZN6kvfuzz15engine_registryEv"), nullptr);
  EXPECT_EQ(dlsym(handle, "_ZN6kvfuzz18probe_capabilitiesERKNS_10EngineInfoE"), nullptr);
  EXPECT_EQ(dlsym(handle, "_ZN6kvfuzz18probe_declarationsERKNS_10EngineInfoE"), nullptr);
  dlclose(handle);  // only drops this reference: resolve_engine keeps the library loaded
}

// A C host's config that kvfuzz never sends (it validates first): an affine group that is not
// MLX's, or rows that are not whole groups or blocks, is one line, never a division by zero.
TEST(BuiltinPlugin, AQuantizedConfigWithRowsThatAreNotWholeGroupsIsRefused) {
  void* handle = dlopen(kBuiltin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const auto entry =
      reinterpret_cast<kvfuzz_engine_plugin_fn>(dlsym(handle, KVFUZZ_ENGINE_PLUGIN_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const kvfuzz_engine_plugin_table* table = entry();
  const kvfuzz_engine_api* paged = nullptr;
  for (uint32_t i = 0; i < table->engine_count; ++i) {
    if (std::string(table->engines[i].name) == "paged") paged = &table->engines[i];
  }
  ASSERT_NE(paged, nullptr);
  const std::vector<int32_t> pages = {0, 1, 2, 3};
  kvfuzz_engine_config c{};
  c.struct_size = sizeof(kvfuzz_engine_config);
  c.q_heads = c.kv_heads = c.sequences = 1;
  c.head_dim = 16;
  c.value_dim = 64;
  c.page_size = 16;
  c.scale = 0.25;
  c.pool_pages = 4;
  c.page_order = pages.data();
  const auto refusal = [&](int32_t format, int32_t group) {
    c.k_format = format;
    c.k_group = group;
    const char* error = nullptr;
    kvfuzz_engine* engine = paged->create(&c, &error);
    if (engine != nullptr) paged->destroy(engine);
    return engine == nullptr && error != nullptr ? std::string(error) : std::string("created");
  };
  EXPECT_EQ(refusal(KVFUZZ_KV_AFFINE4, 48),
            "config.k_format: an affine format with group 48; expected 32, 64 or 128");
  EXPECT_EQ(refusal(KVFUZZ_KV_AFFINE4, 32),
            "config.k_format: affine4 stores rows of a multiple of 32 elements, got 16");
  EXPECT_EQ(refusal(KVFUZZ_KV_Q8_0, 0),
            "config.k_format: q8_0 stores rows of a multiple of 32 elements, got 16");
  c.head_dim = 64;
  EXPECT_EQ(refusal(KVFUZZ_KV_AFFINE8, 64), "created");
  dlclose(handle);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Small layouts keep the batch quick; the generator still mixes in RoPE, windows, dtypes,
// poisons, page orders, resets, truncates and forks.
Scenario generated(uint64_t seed_value) {
  GeneratorOptions options;
  options.typical_head_dim = 4;
  options.max_head_dim = 8;
  PrngChoiceSource choices(seed_value);
  return generate_scenario(choices, options);
}

TEST(BuiltinPlugin, HonestEnginesPassGeneratedScenariosWithTheLinkedInEnginesRows) {
  constexpr uint64_t kScenarios = 100;
  for (const EngineInfo& engine : engine_registry()) {
    if (engine.mutant) continue;
    const auto plugin = builtin_plugin(engine.name);
    for (uint64_t s = 0; s < kScenarios; ++s) {
      const Scenario scenario = generated(7000 + s);
      const Prepared prepared = prepare(scenario);
      const CheckOutcome linked = judge_engine(scenario, prepared, engine);
      const CheckOutcome loaded = judge_engine(scenario, prepared, *plugin);
      const std::string what = engine.name + " on generated scenario " + std::to_string(7000 + s);
      ASSERT_TRUE(linked.verdict.pass) << what;
      EXPECT_TRUE(loaded.verdict.pass) << what << ": " << loaded.run.error.value_or("");
      EXPECT_EQ(loaded.verdict.rows_compared, static_cast<int>(prepared.slots.size())) << what;
      ASSERT_EQ(loaded.run.rows.size(), linked.run.rows.size()) << what;
      // The first row that differs, if any: one message per scenario is enough.
      const auto [mine, theirs] = std::ranges::mismatch(
          loaded.run.rows, linked.run.rows, [](const EngineRow& a, const EngineRow& b) {
            return a.key == b.key && same_bits(a.values, b.values);
          });
      EXPECT_TRUE(mine == loaded.run.rows.end())
          << what << ": row " << to_string(theirs->key) << " differs through the plugin";
    }
  }
}

TEST(BuiltinPlugin, HonestEnginesPassEveryPropertyOnGeneratedScenarios) {
  for (const EngineInfo& engine : engine_registry()) {
    if (engine.mutant) continue;
    const auto plugin = builtin_plugin(engine.name);
    for (uint64_t s = 0; s < test::generated_cases(12); ++s) {
      const Scenario scenario = generated(8000 + s);
      for (const Property property : kAllProperties) {
        const PropertyOutcome out = judge_property(property, scenario, *plugin);
        EXPECT_TRUE(out.pass) << engine.name << ", scenario " << 8000 + s << ":\n" << out.report;
      }
    }
  }
}

// For each mutant, a seed it fails (test_property.cpp's targeted cases, prefix property).
struct Targeted {
  std::string mutant, fixture;
  FailureKind kind;
};

TEST(BuiltinPlugin, EveryMutantIsRejectedExactlyAsWhenLinkedIn) {
  const std::vector<Targeted> cases = {
      {"mask-origin", "worked-example", FailureKind::mismatch},
      {"stale-position", "reset-two-requests", FailureKind::wrong_position},
      {"stale-kv", "reset-two-requests", FailureKind::mismatch},
      {"page-tail-read", "poisoned-page-tail", FailureKind::not_finite},
      {"page-tail-read", "poisoned-page-tail-huge", FailureKind::mismatch},
      {"wrong-kv-head", "gqa-nonzero-scores", FailureKind::mismatch},
      {"truncate-keeps-position", "truncate-rollback", FailureKind::wrong_position},
      {"fork-restarts-positions", "fork-shared-prefix", FailureKind::wrong_position},
      {"truncate-shared-in-place", "fork-then-rollback", FailureKind::not_finite},
      {"split-merge-first-max", "split-partition-spread", FailureKind::not_finite},
      {"split-edge-nan", "batch-split-partition-edge", FailureKind::not_finite},
      // Issue 15's corners: their shrunk regressions (corpus/regressions).
      {"block-table-u8", "../regressions/block-table-u8-prefix-not-finite-8ea6116f",
       FailureKind::not_finite},
      {"slot-offset-u16", "../regressions/slot-offset-u16-prefix-not-finite-4babe9d9",
       FailureKind::not_finite},
      {"slot-mapping-i16", "../regressions/slot-mapping-i16-prefix-not-finite-61377ba6",
       FailureKind::not_finite},
      {"window-evicts-early", "../regressions/window-evicts-early-prefix-mismatch-14aa07c2",
       FailureKind::mismatch},
      {"reset-keeps-block-table", "reset-reuses-poisoned-page", FailureKind::mismatch},
      {"fork-shares-partial-page", "fork-shared-prefix", FailureKind::mismatch},
      // The CUDA kernel faults (test_seeds.cpp's predictions).
      {"cuda-missing-tile-sync", "batch-split-partition-edge", FailureKind::race},
      {"cuda-empty-split-unwritten", "batch-split-partition-edge", FailureKind::not_finite},
      {"cuda-half-warp-reduce", "batch-split-partition-edge", FailureKind::mismatch},
      {"cuda-split-bound-past-length", "one-token-cache", FailureKind::not_finite},
      {"cuda-offset-32bit", "worked-example", FailureKind::mismatch},
      {"cuda-race-unsynced-pages", "one-token-prefix", FailureKind::race},
      {"cuda-barrier-per-branch", "one-token-prefix", FailureKind::barrier_divergence},
      {"cuda-race-merge-no-syncwarp", "one-token-prefix", FailureKind::race},
      // The attention features cross ABI 6's config fields.
      {"softcap-twice-split", "softcap-split-decode", FailureKind::mismatch},
      {"sink-prefill-only", "worked-example-sink", FailureKind::mismatch},
      {"alibi-kv-head-slope", "alibi-gqa-slopes", FailureKind::mismatch},
      {"chunked-local-from-request", "chunked-local-after-truncate", FailureKind::mismatch},
      // The quantized KV caches cross ABI 7's config fields.
      {"fp8-v-scale-dropped", "worked-example-fp8-v", FailureKind::mismatch},
      {"q4_0-nibbles-swapped", "q4_0-nibble-order", FailureKind::mismatch},
      // MLX's affine groups cross ABI 9's config fields.
      {"affine-pack-high-first", "affine-pack-order", FailureKind::mismatch},
      // MLA's value read from its key crosses ABI 8's config field.
      {"mla-value-at-key-end", "mla-latent-value", FailureKind::mismatch},
      // RoPE's interleaved pairs cross ABI 10's config field.
      {"rope-interleaved-as-half-split", "rope-interleaved-pairs", FailureKind::mismatch},
      // RoPE's part crosses ABI 11's config field.
      {"rope-part-at-front", "mla-rope-part", FailureKind::mismatch},
  };
  std::set<std::string> rejected;
  for (const Targeted& c : cases) {
    const std::string what = c.mutant + " on " + c.fixture;
    const Scenario scenario = seed(c.fixture);
    const auto plugin = builtin_plugin(c.mutant);
    const PropertyOutcome loaded = judge_property(Property::prefix, scenario, *plugin);
    const PropertyOutcome linked =
        judge_property(Property::prefix, scenario, *find_engine(c.mutant));
    ASSERT_FALSE(loaded.pass) << what;
    ASSERT_TRUE(loaded.first.has_value() && linked.first.has_value()) << what;
    // The C ABI carries an engine error's message, not its kind: a hazard reaches kvfuzz
    // through a plugin as an engine error (its message names the hazard).
    const FailureKind through_abi = is_engine_error(c.kind) ? FailureKind::engine_error : c.kind;
    EXPECT_EQ(*loaded.signature, (FailureSignature{Property::prefix, through_abi})) << what;
    EXPECT_EQ(*linked.signature, (FailureSignature{Property::prefix, c.kind})) << what;
    // The same first divergence, to the bit: the plugin is the same engine.
    EXPECT_EQ(loaded.first->key, linked.first->key) << what;
    EXPECT_EQ(loaded.first->q_head, linked.first->q_head) << what;
    EXPECT_EQ(std::memcmp(&loaded.first->got, &linked.first->got, sizeof(double)), 0) << what;
    EXPECT_TRUE(contains(loaded.report, "engine '" + plugin->name + "'")) << loaded.report;
    rejected.insert(c.mutant);
  }
  for (const EngineInfo& engine : engine_registry()) {
    if (engine.mutant) {
      EXPECT_TRUE(rejected.count(engine.name)) << engine.name << " not covered";
    }
  }
}

// ---------------------------------------------------------------------------------------
// Declarations (ABI 2, 3 and 4), and plugins built against ABI 1, 2 and 3

std::shared_ptr<const EngineInfo> declaring(const std::string& name) {
  return resolve_engine("plugin:" + std::string(KVFUZZ_PLUGIN_DECLARING) + ":" + name);
}

TEST(PluginDeclarations, EveryDeclarationComesBackExactly) {
  const EngineDeclarations all = probe_declarations(*declaring("declares-all"));
  EXPECT_EQ(all.bitwise,
            (BitwiseClaims{.batch = true, .schedule = true, .layout = true, .poison = true}));
  EXPECT_EQ(all.numerics, (EngineNumerics{.output = DType::bf16,
                                          .p = DType::bf16,
                                          .score_accumulation = DType::f16,
                                          .value_accumulation = DType::f16,
                                          .rotated_keys_in_storage = true,
                                          .rotated_queries_in_storage = true,
                                          .rope_angles_exact = true,
                                          .split_combine_lse = true,
                                          .split_partials = DType::bf16,
                                          .p_normalised = true,
                                          .rope_tables = DType::bf16,
                                          .exp_ulps = 1024,
                                          .query_blocks = true}));
  EXPECT_EQ(all.supports, (EngineSupports{.dtypes = {DType::f16, DType::bf16},
                                          .head_dim_multiple = 8,
                                          .max_head_dim = 256,
                                          .max_q_heads = 32,
                                          .max_context = 8192,
                                          .value_dim_is_head_dim = true,
                                          .rope_required = true,
                                          .windows = false,
                                          .softcap = true,
                                          .sinks = true,
                                          .alibi = true,
                                          .chunked_local = true,
                                          .kv_fp8 = true,
                                          .kv_ggml_blocks = true,
                                          .kv_affine = true,
                                          .kv_channel = true,
                                          .kv_one_format = true,
                                          .kv_tensor_scales = true,
                                          .value_from_key = true,
                                          .rope_interleaved = true,
                                          .rope_dims = true}));
  // Every field the ABI carries is away from its default: only what a plugin says
  // otherwise (its functions, the model door: a whole model's activations too) is not.
  EXPECT_EQ(fieldwise::fields_at_default(all),
            (std::vector<std::string>{"capabilities.truncate", "capabilities.fork",
                                      "numerics.activations", "whole_model"}));

  const EngineDeclarations some = probe_declarations(*declaring("declares-some"));
  EXPECT_EQ(some.bitwise, BitwiseClaims{});
  EXPECT_EQ(some.numerics, (EngineNumerics{.rotated_keys_in_storage = false}));
  EXPECT_EQ(some.supports, (EngineSupports{.dtypes = {DType::f32}}));

  const EngineDeclarations none = probe_declarations(*declaring("declares-none"));
  EXPECT_EQ(none.bitwise, BitwiseClaims{});
  EXPECT_EQ(none.numerics, EngineNumerics{});
  EXPECT_FALSE(none.numerics.rotated_keys_in_storage.has_value());
  EXPECT_EQ(none.supports, EngineSupports{});
}

// Every field of a C++ engine's declarations crosses the ABI both ways: export_engines
// writes it into the table and kvfuzz reads it back. The engine declares every field away
// from its default (tests/declarations_away.h), so a field the ABI does not carry is named.
TEST(PluginDeclarations, EveryFieldOfAnExportedEngineComesBack) {
  const auto plugin = resolve_engine("plugin:" + std::string(KVFUZZ_PLUGIN_EXPORTED_DECLARING) +
                                     ":declares-everything");
  EngineDeclarations want = fieldwise::away_from_defaults<EngineDeclarations>();
  want.whole_model = false;  // an attention engine; whole models cross by the model door
  want.numerics.activations = DType::f32;  // a whole model's: the model door's too
  EXPECT_EQ(fieldwise::differing_fields(probe_declarations(*plugin), want),
            std::vector<std::string>{});
}

// ABI 5's numerics_of: an exported C++ engine's numerics are its own, of the layout it was
// made for. The engine whose rows are rounded to the layout's dtype and says so passes in
// every dtype; the same rows declared f32 for every layout fail on a bf16 one.
TEST(PluginDeclarations, NumericsFollowTheLayoutThroughNumericsOf) {
  const std::string path = KVFUZZ_PLUGIN_EXPORTED_DECLARING;
  const auto follows = resolve_engine("plugin:" + path + ":follows-the-dtype");
  const auto claims_f32 = resolve_engine("plugin:" + path + ":rounds-declares-f32");
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Scenario scenario = test::worked_example();
    scenario.layout.dtype = dtype;
    EXPECT_EQ(follows->make(engine_config(scenario))->numerics().output, dtype);
    const CheckOutcome judged = judge_engine(scenario, prepare(scenario), *follows);
    EXPECT_TRUE(judged.verdict.pass) << describe_divergence(*judged.verdict.first);
    const bool passes = judge_engine(scenario, prepare(scenario), *claims_f32).verdict.pass;
    EXPECT_EQ(passes, dtype == DType::f32);
  }
}

// A numerics_of that changes anything but numerics, gives a value out of range or fails
// makes no engine, with one line saying why.
TEST(PluginDeclarations, ABadNumericsOfIsRefusedNamingWhy) {
  const auto error_of = [](const std::string& name) -> std::string {
    const auto engine =
        resolve_engine("plugin:" + std::string(KVFUZZ_PLUGIN_DECLARING) + ":" + name);
    try {
      engine->make(engine_config(test::worked_example()));
    } catch (const EngineError& e) {
      return e.what();
    }
    return "(made)";
  };
  EXPECT_EQ(error_of("numerics-of-changes-supports"),
            "plugin numerics_of changed a declaration other than numerics (capabilities, "
            "bitwise claims, supports, the entry's name or functions); only numerics may follow "
            "the layout (kvfuzz/engine_abi.h)");
  EXPECT_NE(error_of("numerics-of-out-of-range").find("plugin numerics_of gave output_dtype 99"),
            std::string::npos)
      << error_of("numerics-of-out-of-range");
  EXPECT_EQ(error_of("numerics-of-fails"),
            "plugin numerics_of failed: no numerics for this layout");
}

std::shared_ptr<const EngineInfo> abi_v1(const std::string& name) {
  return resolve_engine("plugin:" + std::string(KVFUZZ_PLUGIN_ABI_V1) + ":" + name);
}

// An ABI 1 table is read with ABI 1's stride (every entry is there, with its name, flag and
// capabilities) and its engines declare the defaults: a claim the engine would make
// through ABI 2 is not made.
TEST(PluginAbi1, EveryEntryLoadsWithTheDefaultDeclarations) {
  for (const EngineInfo& engine : engine_registry()) {
    SCOPED_TRACE(engine.name);
    const auto plugin = abi_v1(engine.name);
    EXPECT_EQ(plugin->description, engine.description);
    EXPECT_EQ(plugin->mutant, engine.mutant);
    EngineDeclarations want;
    want.capabilities = probe_declarations(engine).capabilities;
    expect_same_declarations(probe_declarations(*plugin), want);
  }
}

// What an engine declares through an entry of ABI `version`: the fields later versions
// added at their defaults (the built-in engines need no RoPE and take windows, ABI 3's).
EngineDeclarations as_of_version(EngineDeclarations declared, int version) {
  const EngineNumerics defaults;
  if (version < 11) {  // ABI 11's RoPE part, and its later flag for per-channel keys
    declared.supports.rope_dims = false;
    declared.supports.kv_channel = false;
  }
  if (version < 10) {  // ABI 10's interleaved RoPE pairs
    declared.supports.rope_interleaved = false;
  }
  if (version < 9) {  // ABI 9's affine KV groups
    declared.supports.kv_affine = false;
  }
  if (version < 8) {  // ABI 8's value read from its key
    declared.supports.value_from_key = false;
  }
  if (version < 7) {  // ABI 7's quantized KV formats
    declared.supports.kv_fp8 = false;
    declared.supports.kv_ggml_blocks = false;
  }
  if (version < 6) {  // ABI 6's attention features
    for (bool EngineSupports::*feature : kFeatureSupports) declared.supports.*feature = false;
  }
  if (version < 4) {
    declared.numerics.split_combine_lse = defaults.split_combine_lse;
    declared.numerics.split_partials = defaults.split_partials;
    declared.numerics.p_normalised = defaults.p_normalised;
    declared.numerics.rope_tables = defaults.rope_tables;
    declared.numerics.exp_ulps = defaults.exp_ulps;
  }
  return declared;
}

// An ABI 2, 3 or 4 table is read with its version's stride, every declaration of that
// version as the entry makes it, and what later versions added at its defaults: ABI 3's
// KVFUZZ_SUPPORTS_* (the built-in engines need no RoPE and take windows), ABI 4's
// numerics flags and partials dtype (which some built-in engines declare otherwise), and
// ABI 5's numerics_of (none: the entry's numerics serve every layout).
TEST(PluginAbi2To4, EveryEntryLoadsWithItsDeclarationsAndLaterVersionsDefaults) {
  for (const auto& [version, path] :
       {std::pair{2, KVFUZZ_PLUGIN_ABI_V2}, std::pair{3, KVFUZZ_PLUGIN_ABI_V3},
        std::pair{4, KVFUZZ_PLUGIN_ABI_V4}}) {
    bool some_declaration = false, some_dropped = false;
    for (const EngineInfo& engine : engine_registry()) {
      SCOPED_TRACE(engine.name + " through ABI " + std::to_string(version));
      const auto plugin = resolve_engine("plugin:" + std::string(path) + ":" + engine.name);
      EXPECT_EQ(plugin->description, engine.description);
      EXPECT_EQ(plugin->mutant, engine.mutant);
      const EngineDeclarations declared = probe_declarations(engine);
      ASSERT_FALSE(declared.supports.rope_required);
      ASSERT_TRUE(declared.supports.windows);
      const EngineDeclarations want = as_of_version(declared, version);
      const EngineDeclarations got = probe_declarations(*plugin);
      EXPECT_EQ(fieldwise::differing_fields(got, want), std::vector<std::string>{});
      some_declaration = some_declaration || want.numerics != EngineNumerics{};
      some_dropped = some_dropped || want.numerics != declared.numerics;
    }
    EXPECT_TRUE(some_declaration) << "no built-in engine declares numerics: ABI " << version
                                  << " goes untested";
    if (version < 4) {
      EXPECT_TRUE(some_dropped) << "no built-in engine declares what ABI 4 added";
    }
  }
}

TEST(PluginAbi1, EnginesAreJudgedAsBefore) {
  const auto honest = abi_v1("contiguous");
  for (uint64_t s = 0; s < 30; ++s) {
    const Scenario scenario = generated(9000 + s);
    EXPECT_TRUE(judge_engine(scenario, prepare(scenario), *honest).verdict.pass) << 9000 + s;
    for (const Property property : kAllProperties) {
      const PropertyOutcome out = judge_property(property, scenario, *honest);
      EXPECT_TRUE(out.pass) << "scenario " << 9000 + s << ":\n" << out.report;
    }
  }
  const Scenario worked = seed("worked-example");
  const PropertyOutcome mutant = judge_property(Property::prefix, worked, *abi_v1("mask-origin"));
  EXPECT_FALSE(mutant.pass);
  EXPECT_EQ(*mutant.signature, (FailureSignature{Property::prefix, FailureKind::mismatch}));
}

// ---------------------------------------------------------------------------------------
// Plugins refused at load: one line naming the spec and the defect

struct Refusal {
  std::string library;
  std::vector<std::string> says;
};

TEST(PluginLoad, EveryBrokenTableIsRefusedWithOneLineNamingTheDefect) {
  const std::vector<Refusal> cases = {
      {KVFUZZ_PLUGIN_ABI_VERSION_NEXT,
       {"plugin built for engine ABI 12, this kvfuzz speaks 11 and reads 1, 2, 3, 4, 5, 6, 7, "
        "8, 9 and 10"}},
      {KVFUZZ_PLUGIN_NULL_TABLE, {"kvfuzz_engine_plugin() returned no table (NULL)"}},
      {KVFUZZ_PLUGIN_STRUCT_SIZE_TOO_SMALL,
       {"engine 1 has struct_size 16; expected " + std::to_string(sizeof(kvfuzz_engine_api))}},
      {KVFUZZ_PLUGIN_NO_ENGINES, {"no engines (engine_count 0", "expected at least one"}},
      {KVFUZZ_PLUGIN_MISSING_NAME, {"engine 1 has no name (NULL)"}},
      {KVFUZZ_PLUGIN_INVALID_NAME, {"engine 1 is named 'two words'", "[A-Za-z0-9._-]+"}},
      {KVFUZZ_PLUGIN_DUPLICATE_NAMES, {"engines 0 and 1 are both named 'first'"}},
      {KVFUZZ_PLUGIN_NULL_STEP, {"engine 'second' has no step function (NULL)"}},
      {KVFUZZ_PLUGIN_TRUNCATE_WITHOUT_FUNCTION,
       {"engine 'second' announces KVFUZZ_CAN_TRUNCATE but its truncate function is NULL"}},
      {KVFUZZ_PLUGIN_FORK_WITHOUT_FUNCTION,
       {"engine 'second' announces KVFUZZ_CAN_FORK but its fork function is NULL"}},
      {KVFUZZ_PLUGIN_TOO_MANY_ENGINES,
       {"the plugin's table claims 1025 engines; expected at most 1024"}},
      {KVFUZZ_PLUGIN_NULL_ENGINES,
       {"the plugin's table claims 2 engines but its engines array is NULL"}},
      {KVFUZZ_PLUGIN_ENTRY_ABI_VERSION_1, {"engine 1 has abi_version 1; expected 11, the table's"}},
      {KVFUZZ_PLUGIN_ABI_1_TABLE_OF_ABI_3_ENTRIES,
       {"engine 0 has struct_size " + std::to_string(sizeof(kvfuzz_engine_api)) + "; expected " +
        std::to_string(KVFUZZ_ENGINE_API_V1_SIZE) + ", KVFUZZ_ENGINE_API_V1_SIZE in ABI 1"}},
      {KVFUZZ_PLUGIN_ABI_2_TABLE_OF_ABI_3_ENTRIES,
       {"engine 0 has struct_size " + std::to_string(sizeof(kvfuzz_engine_api)) + "; expected " +
        std::to_string(KVFUZZ_ENGINE_API_V2_SIZE) + ", KVFUZZ_ENGINE_API_V2_SIZE in ABI 2"}},
      // The refused name escaped: the message stays one line of valid UTF-8.
      {KVFUZZ_PLUGIN_NAME_NOT_TEXT,
       {"engine 1 is named 'caf\\xe9\\nlatte'; expected a name of [A-Za-z0-9._-]+"}},
      {KVFUZZ_PLUGIN_DESCRIPTION_NOT_UTF8,
       {"engine 'second' has a description that is not valid UTF-8 (byte '\\xe9' at offset 10); "
        "expected one line of UTF-8 text"}},
      {KVFUZZ_PLUGIN_DESCRIPTION_WITH_NEWLINE,
       {"engine 'second' has a description with a control character ('\\n' at offset 10); "
        "expected one line of UTF-8 text"}},
      {KVFUZZ_PLUGIN_NO_SYMBOL,
       {"has no symbol kvfuzz_engine_plugin", "undefined symbol: kvfuzz_engine_plugin"}},
      // ABI 2's declarations
      {KVFUZZ_PLUGIN_BITWISE_UNKNOWN_FLAG,
       {"engine 'second' has bitwise 0x14; expected KVFUZZ_BITWISE_* flags (bits of 0xf)"}},
      {KVFUZZ_PLUGIN_OUTPUT_DTYPE_UNKNOWN,
       {"engine 'second' has output_dtype 3; expected KVFUZZ_DTYPE_F32, _F16 or _BF16"}},
      {KVFUZZ_PLUGIN_P_DTYPE_ZERO,
       {"engine 'second' has p_dtype 0; expected KVFUZZ_DTYPE_NONE, _F16 or _BF16",
        "kvfuzz_engine_api_defaults() sets NONE"}},
      {KVFUZZ_PLUGIN_P_DTYPE_UNKNOWN, {"engine 'second' has p_dtype -2; expected"}},
      {KVFUZZ_PLUGIN_SCORE_ACCUMULATION_BF16,
       {"engine 'second' has score_accumulation 2; expected KVFUZZ_DTYPE_F32 or _F16 (0 or 1)"}},
      {KVFUZZ_PLUGIN_VALUE_ACCUMULATION_UNKNOWN,
       {"engine 'second' has value_accumulation 9; expected KVFUZZ_DTYPE_F32 or _F16"}},
      {KVFUZZ_PLUGIN_ROTATED_KEYS_TWO,
       {"engine 'second' has rotated_keys_in_storage 2; expected 1 (yes), 0 (no) or -1 (not "
        "declared)"}},
      {KVFUZZ_PLUGIN_DTYPES_UNKNOWN_BIT,
       {"engine 'second' has dtypes 0xa; expected bits 1u << KVFUZZ_DTYPE_* (of 0x7)"}},
      {KVFUZZ_PLUGIN_HEAD_DIM_MULTIPLE_NEGATIVE,
       {"engine 'second' has head_dim_multiple -8; expected 0 (no limit) or more"}},
      {KVFUZZ_PLUGIN_MAX_HEAD_DIM_NEGATIVE, {"engine 'second' has max_head_dim -1; expected"}},
      {KVFUZZ_PLUGIN_MAX_Q_HEADS_NEGATIVE, {"engine 'second' has max_q_heads -4; expected"}},
      {KVFUZZ_PLUGIN_MAX_CONTEXT_NEGATIVE, {"engine 'second' has max_context -100; expected"}},
      // ABI 3's
      {KVFUZZ_PLUGIN_SUPPORTS_UNKNOWN_FLAG,
       {"engine 'second' has supports 0x8002; expected KVFUZZ_SUPPORTS_* flags (bits of 0x7fff)"}},
      {KVFUZZ_PLUGIN_RESERVED_NOT_ZERO, {"engine 'second' has reserved 0x1; expected 0"}},
  };
  for (const Refusal& c : cases) {
    const std::string spec = "plugin:" + c.library;
    const std::string message = spec_error(spec);
    EXPECT_TRUE(message.starts_with("--engine " + spec + ": ")) << message;
    EXPECT_FALSE(contains(message, "\n")) << message;
    EXPECT_FALSE(contains(message, "\xe9")) << message;
    for (const std::string& part : c.says) EXPECT_TRUE(contains(message, part)) << message;
  }
}

TEST(PluginLoad, AFileThatIsNoLibraryGivesTheLoadersReason) {
  const std::string missing = "/nonexistent-kvfuzz-dir/libnothing.so";
  const std::string message = spec_error("plugin:" + missing);
  EXPECT_TRUE(contains(message, "cannot load the library")) << message;
  EXPECT_TRUE(contains(message, missing + ": cannot open shared object file")) << message;

  const std::string text_file = (kSeeds / "worked-example.json").string();
  const std::string not_elf = spec_error("plugin:" + text_file);
  EXPECT_TRUE(contains(not_elf, "--engine plugin:" + text_file + ": cannot load the library: "))
      << not_elf;
  EXPECT_FALSE(contains(not_elf, "\n")) << not_elf;
}

TEST(PluginLoad, SeveralEnginesNeedANameAndAnUnknownNameListsThem) {
  const std::string names =
      "wrong-row-count, calls-fail, calls-fail-silently, create-fails, step-throws, "
      "unannounced-ops";
  EXPECT_EQ(
      spec_error("plugin:" + kMisbehaving),
      "--engine plugin:" + kMisbehaving + ": the plugin has 6 engines; add :NAME, one of " + names);
  EXPECT_EQ(spec_error("plugin:" + kMisbehaving + ":calls-fial"),
            "--engine plugin:" + kMisbehaving +
                ":calls-fial: the plugin has no engine 'calls-fial'; expected one of " + names);
  // The builtin plugin exports the attention engines (engine_registry; the whole-model
  // engines are tested through a plugin of their own, tests/model/test_model_plugin.cpp).
  std::string builtin_names;
  for (const EngineInfo& e : engine_registry()) {
    builtin_names += (builtin_names.empty() ? "" : ", ") + e.name;
  }
  const std::string all = spec_error("plugin:" + kBuiltin);
  EXPECT_TRUE(contains(all, "the plugin has " + std::to_string(engine_registry().size()) +
                                " engines; add :NAME, one of " + builtin_names))
      << all;
}

TEST(PluginLoad, AnySpellingOfThePathLoadsTheLibraryAndTheSpecStaysTheName) {
  const fs::path library(kBuiltin);
  const std::string roundabout =
      (library.parent_path() / ".." / library.parent_path().filename() / library.filename())
          .string();
  const auto a = builtin_plugin("paged");
  const auto b = resolve_engine("plugin:" + roundabout + ":paged");
  EXPECT_EQ(b->name, "plugin:" + roundabout + ":paged");  // the spec as given
  EXPECT_EQ(a->description, b->description);
  const Scenario scenario = seed("worked-example");
  EXPECT_TRUE(judge_engine(scenario, prepare(scenario), *b).verdict.pass);
}

// ---------------------------------------------------------------------------------------
// Plugins that misbehave at call time: an engine error naming the call, never a crash

std::shared_ptr<const EngineInfo> misbehaving(const std::string& name) {
  return resolve_engine("plugin:" + kMisbehaving + ":" + name);
}

// The first divergence of the worked example on `engine`: its kind and the error text.
Divergence first_divergence(const EngineInfo& engine) {
  const Scenario scenario = seed("worked-example");
  const CheckOutcome outcome = judge_engine(scenario, prepare(scenario), engine);
  EXPECT_FALSE(outcome.verdict.pass);
  return outcome.verdict.first.value_or(Divergence{});
}

TEST(PluginCalls, AWrongRowCountIsAnEngineErrorNamingChunkRowsAndTokens) {
  const Divergence first = first_divergence(*misbehaving("wrong-row-count"));
  EXPECT_EQ(first.kind, FailureKind::engine_error);
  EXPECT_TRUE(contains(first.detail,
                       "plugin step returned a wrong row count for chunk 0 (seq 0): 2 rows "
                       "written, 3 tokens expected"))
      << first.detail;
}

TEST(PluginCalls, AFailingStepIsAnEngineErrorWithThePluginsMessage) {
  const Divergence first = first_divergence(*misbehaving("calls-fail"));
  EXPECT_EQ(first.kind, FailureKind::engine_error);
  EXPECT_TRUE(contains(first.detail, "plugin step failed: step refused: the KV cache is on fire"))
      << first.detail;

  const Divergence silent = first_divergence(*misbehaving("calls-fail-silently"));
  EXPECT_EQ(silent.kind, FailureKind::engine_error);
  EXPECT_TRUE(contains(silent.detail, "plugin step failed: (no message)")) << silent.detail;
}

TEST(PluginCalls, AFailingCreateIsAnEngineErrorWithThePluginsMessage) {
  const Divergence first = first_divergence(*misbehaving("create-fails"));
  EXPECT_EQ(first.kind, FailureKind::engine_error);
  EXPECT_TRUE(contains(first.detail, "plugin create failed: no device memory for this layout"))
      << first.detail;
}

TEST(PluginCalls, AnExceptionEscapingThePluginIsAnEngineErrorNotACrash) {
  const Divergence first = first_divergence(*misbehaving("step-throws"));
  EXPECT_EQ(first.kind, FailureKind::engine_error);
  EXPECT_TRUE(contains(first.detail, "plugin step threw a C++ exception across the C ABI"))
      << first.detail;
}

// The message of the EngineError `call` throws, or "" when it throws none.
template <class Call>
std::string engine_error(Call&& call) {
  try {
    call();
  } catch (const EngineError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginCalls, ResetTruncateAndForkFailuresCarryTheMessageOrSayThereIsNone) {
  const EngineConfig config = engine_config(seed("fork-shared-prefix"));
  const std::unique_ptr<Engine> loud = misbehaving("calls-fail")->make(config);
  EXPECT_TRUE(loud->capabilities().truncate);
  EXPECT_TRUE(loud->capabilities().fork);
  const std::string fire = "the KV cache is on fire";
  EXPECT_EQ(engine_error([&] { loud->reset(0); }), "plugin reset failed: reset refused: " + fire);
  EXPECT_EQ(engine_error([&] { loud->truncate(0, 0); }),
            "plugin truncate failed: truncate refused: " + fire);
  EXPECT_EQ(engine_error([&] { loud->fork(0, 1); }), "plugin fork failed: fork refused: " + fire);

  const std::unique_ptr<Engine> silent = misbehaving("calls-fail-silently")->make(config);
  EXPECT_EQ(engine_error([&] { silent->reset(0); }), "plugin reset failed: (no message)");
  EXPECT_EQ(engine_error([&] { silent->truncate(0, 0); }), "plugin truncate failed: (no message)");
  EXPECT_EQ(engine_error([&] { silent->fork(0, 1); }), "plugin fork failed: (no message)");
}

// unannounced-ops has truncate and fork functions that fail with "should never be called";
// wrong-row-count has none (NULL).
TEST(PluginCalls, AnOperationThePluginDoesNotAnnounceIsNeverCalled) {
  for (const std::string name : {"unannounced-ops", "wrong-row-count"}) {
    SCOPED_TRACE(name);
    const auto engine = misbehaving(name);
    const std::unique_ptr<Engine> instance =
        engine->make(engine_config(seed("fork-shared-prefix")));
    EXPECT_FALSE(instance->capabilities().truncate);
    EXPECT_FALSE(instance->capabilities().fork);
    EXPECT_EQ(engine_error([&] { instance->truncate(0, 0); }),
              "this engine does not support truncate (seq 0)");
    EXPECT_EQ(engine_error([&] { instance->fork(0, 1); }),
              "this engine does not support fork (0 -> 1)");
  }
  // The runner refuses the operation itself, before the engine sees it.
  const auto engine = misbehaving("unannounced-ops");
  for (const auto& [fixture, what] :
       {std::pair<std::string, std::string>{"truncate-rollback", "truncate of seq 0 to 1 tokens"},
        {"fork-shared-prefix", "fork of seq 0 into seq 1"}}) {
    const Scenario scenario = seed(fixture);
    const CheckOutcome outcome = judge_engine(scenario, prepare(scenario), *engine);
    EXPECT_EQ(outcome.run.error.value_or("(no error)"),
              "engine threw on " + what +
                  ": the engine does not announce this operation in capabilities()")
        << fixture;
  }
}

// The plugin's first create announces truncate and fork in its table, points create, step
// and reset at functions that fail, and renames the engine
// (tests/doors/plugins/shifting_table.cpp).
TEST(PluginCalls, APluginThatChangesItsTableAfterLoadChangesNothingKvfuzzCalls) {
  const std::string spec = "plugin:" + kShifting;
  const std::string description =
      "Changes its table after kvfuzz has read it \xe2\x80\x94 on purpose.";
  const auto info = resolve_engine(spec);
  EXPECT_EQ(info->description, description);
  const EngineConfig config = engine_config(seed("fork-shared-prefix"));
  const std::unique_ptr<Engine> engine = info->make(config);

  // The table has changed: the test would prove nothing otherwise.
  void* handle = dlopen(kShifting.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const auto plugin =
      reinterpret_cast<kvfuzz_engine_plugin_fn>(dlsym(handle, KVFUZZ_ENGINE_PLUGIN_SYMBOL));
  ASSERT_NE(plugin, nullptr);
  const kvfuzz_engine_api& changed = plugin()->engines[0];
  EXPECT_EQ(changed.capabilities, KVFUZZ_CAN_TRUNCATE | KVFUZZ_CAN_FORK);
  EXPECT_EQ(changed.mutant, 1u);
  EXPECT_STREQ(changed.name, "renamed");
  EXPECT_EQ(changed.bitwise, KVFUZZ_BITWISE_BATCH);
  EXPECT_EQ(changed.output_dtype, KVFUZZ_DTYPE_BF16);
  dlclose(handle);  // only drops this reference

  // kvfuzz calls what the table held at load: the engine announces nothing, its truncate and
  // fork are never called, its step and reset work, and another create succeeds.
  EXPECT_FALSE(engine->capabilities().truncate);
  EXPECT_FALSE(engine->capabilities().fork);
  EXPECT_EQ(engine->bitwise_claims(), BitwiseClaims{});
  EXPECT_EQ(engine->numerics(), EngineNumerics{});
  EXPECT_EQ(engine->supports(), EngineSupports{});
  EXPECT_EQ(engine_error([&] { engine->truncate(0, 0); }),
            "this engine does not support truncate (seq 0)");
  EXPECT_EQ(engine_error([&] { engine->fork(0, 1); }),
            "this engine does not support fork (0 -> 1)");
  EXPECT_EQ(engine_error([&] { engine->reset(0); }), "");
  EXPECT_NE(info->make(config), nullptr);
  for (const auto& [fixture, what] :
       {std::pair<std::string, std::string>{"truncate-rollback", "truncate of seq 0 to 1 tokens"},
        {"fork-shared-prefix", "fork of seq 0 into seq 1"}}) {
    const Scenario scenario = seed(fixture);
    const CheckOutcome outcome = judge_engine(scenario, prepare(scenario), *info);
    EXPECT_EQ(outcome.run.error.value_or("(no error)"),
              "engine threw on " + what +
                  ": the engine does not announce this operation in capabilities()")
        << fixture;
    EXPECT_EQ(outcome.run.rows.size(), 3u) << fixture;  // the first append, by the old step
  }

  // Its name and description are kvfuzz's copies.
  const auto again = resolve_engine(spec + ":shifty");
  EXPECT_EQ(again->description, description);
  EXPECT_FALSE(again->mutant);
  EXPECT_EQ(spec_error(spec + ":renamed"),
            "--engine " + spec +
                ":renamed: the plugin has no engine 'renamed'; expected one of "
                "shifty");
}

// ---------------------------------------------------------------------------------------
// The kvfuzz command with plugin engines

using test::run_kvfuzz;

int lines(const std::string& text) {
  int count = 0;
  for (const char c : text) count += c == '\n';
  return count;
}

struct TempDir {
  fs::path path =
      fs::temp_directory_path() / ("kvfuzz-plugin-test-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(PluginCommand, CheckPassesAnHonestPluginEngine) {
  const auto r = run_kvfuzz("check --engine plugin:" + kBuiltin + ":contiguous --cases 20");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

TEST(PluginCommand, CheckRejectsAMutantPluginEngineShrinkAndReplayAgree) {
  const TempDir dir;
  const std::string spec = "plugin:" + kBuiltin + ":mask-origin";
  const auto check = run_kvfuzz("check --engine " + spec + " --cases 20 --quiet --out " +
                                (dir.path / "check").string());
  EXPECT_EQ(check.status, 0) << check.out << check.err;  // a mutant rejected, as expected
  std::vector<fs::path> saved;
  if (fs::exists(dir.path / "check")) {
    for (const auto& entry : fs::directory_iterator(dir.path / "check")) {
      saved.push_back(entry.path());
    }
  }
  ASSERT_EQ(saved.size(), 1u) << check.out << check.err;
  EXPECT_TRUE(contains(saved[0].filename().string(), file_safe_name(spec))) << saved[0];

  const fs::path out = dir.path / "shrunk";
  const auto shrink = run_kvfuzz("shrink " + saved[0].string() + " --engine " + spec +
                                 " --property prefix --quiet --out " + out.string() + " --raw " +
                                 (dir.path / "raw").string());
  EXPECT_EQ(shrink.status, 1) << shrink.out << shrink.err;  // a failure shrunk and saved
  ASSERT_TRUE(fs::is_directory(out)) << shrink.out << shrink.err;
  const fs::path shrunk = fs::directory_iterator(out)->path();
  EXPECT_TRUE(shrunk.filename().string().starts_with(file_safe_name(spec) + "-prefix-mismatch-"))
      << shrunk;
  // The minimum of mask-origin: one cached token and one more that should see both.
  const Scenario minimum = load_fixture(shrunk);
  EXPECT_LE(minimum.program.size(), 2u) << test::slurp(shrunk);
  EXPECT_LE(token_count(minimum.tokens), 3) << test::slurp(shrunk);
  EXPECT_EQ(minimum.provenance.engine.value_or(""), spec);

  const auto fails = run_kvfuzz("replay " + shrunk.string() + " --engine " + spec);
  EXPECT_EQ(fails.status, 1) << fails.out << fails.err;
  const auto passes = run_kvfuzz("replay " + shrunk.string() + " --engine contiguous");
  EXPECT_EQ(passes.status, 0) << passes.out << passes.err;
}

TEST(PluginCommand, ABrokenPluginExitsTwoWithOneLineNamingIt) {
  for (const std::string& library :
       {std::string(KVFUZZ_PLUGIN_ABI_VERSION_NEXT), std::string(KVFUZZ_PLUGIN_NO_SYMBOL),
        std::string(KVFUZZ_PLUGIN_NAME_NOT_TEXT),
        std::string(KVFUZZ_PLUGIN_DESCRIPTION_WITH_NEWLINE),
        std::string("/nonexistent-kvfuzz-dir/libnothing.so")}) {
    const auto r = run_kvfuzz("check --engine plugin:" + library + " --cases 1");
    EXPECT_EQ(r.status, 2) << library << ": " << r.out << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_TRUE(contains(r.err, library)) << r.err;
  }
  const auto replay = run_kvfuzz("replay " + (kSeeds / "worked-example.json").string() +
                                 " --engine plugin:" + kMisbehaving);
  EXPECT_EQ(replay.status, 2) << replay.out << replay.err;
  EXPECT_TRUE(contains(replay.err, "add :NAME")) << replay.err;
}

// The same flash engine through ABI 1 (no declarations: RoPE angles perhaps f32, rotated
// keys perhaps unrounded) and built in (angles in double, rotated keys cached in the storage
// dtype, both declared): at 2048-token RoPE contexts the undeclared one leaves rows unjudged,
// and check explains the column under its table; the declared one leaves none.
TEST(Plugin, CheckExplainsUnjudgedRowsOfAnEngineThatDeclaresNothing) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("kvfuzz-plugin-unj-" + std::to_string(::getpid())))
          .string();
  // Prefix alone: unjudged rows are the reference comparison's, and the invariances would
  // make this long-context run ten times slower (seven minutes under ASan).
  const std::string args =
      " --property prefix --cases 3 --seed 5 --max-tokens 2048 --quiet --out " + out;
  const auto undeclared =
      run_kvfuzz("check --engine plugin:" + std::string(KVFUZZ_PLUGIN_ABI_V1) + ":flash" + args);
  EXPECT_EQ(undeclared.status, 0) << undeclared.out << undeclared.err;
  EXPECT_NE(undeclared.out.find("\nunjudged: rows within their bound"), std::string::npos)
      << undeclared.out;
  const auto declared = run_kvfuzz("check --engine flash" + args);
  EXPECT_EQ(declared.status, 0) << declared.out << declared.err;
  EXPECT_EQ(declared.out.find("\nunjudged:"), std::string::npos) << declared.out;
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kvfuzz
