// Small things a new user hit (issue 13): several own engines in one --engine list, list
// --engine, replay of several paths, engine-error reports without a key range, shrink
// saying when nothing shrank, and a fixture's failed `expect` (a mismatch, exit 1) kept
// apart from a malformed one (bad input, exit 2).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "command.h"

namespace {

namespace fs = std::filesystem;
const fs::path kSource = KVFUZZ_SOURCE_DIR;

using kvfuzz::test::slurp;
using Result = kvfuzz::test::CommandResult;

Result kvfuzz(const std::string& args) {
  return kvfuzz::test::run_kvfuzz(args);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

const std::string kWorked = (kSource / "corpus/seeds/worked-example.json").string();

// explain's layout line names what changes a row beyond the shapes: RoPE's pairs and part,
// the features, the KV formats and MLA's value.
TEST(SmallThings, ExplainNamesRopesPairsAndPartAndTheLayoutsFeatures) {
  const Result mla = kvfuzz("explain " + (kSource / "corpus/seeds/mla-rope-part.json").string() +
                            " --engine contiguous");
  EXPECT_EQ(mla.status, 0) << mla.out << mla.err;
  EXPECT_TRUE(has(mla.out,
                  "RoPE theta 10000.000000 on the last 2 elements, value read from "
                  "its key (MLA)\n"))
      << mla.out;
  const Result pairs =
      kvfuzz("explain " + (kSource / "corpus/seeds/rope-interleaved-pairs.json").string() +
             " --engine contiguous");
  EXPECT_TRUE(has(pairs.out, "RoPE theta 10000.000000 in interleaved pairs\n")) << pairs.out;
}
const std::string kHonestExec =
    "python3 " + (kSource / "examples/python-engine/honest_engine.py").string();

// A temporary directory per test, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("kvfuzz-small-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The worked example with one piece of its text replaced, written to `dir/name`.
fs::path worked_example_with(const fs::path& dir, const std::string& name, const std::string& from,
                             const std::string& to) {
  std::string text = slurp(kWorked);
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  const fs::path path = dir / name;
  std::ofstream(path) << text;
  return path;
}

#ifdef KVFUZZ_BUILTIN_PLUGIN
const std::string kBuiltin = KVFUZZ_BUILTIN_PLUGIN;
const std::string kDeclaring = KVFUZZ_PLUGIN_DECLARING;
const std::string kMisbehaving = KVFUZZ_PLUGIN_MISBEHAVING;

// Two engines of one's own side by side, and mixed with built-in names: every command that
// takes several engines runs each of them.
TEST(SmallThings, TwoPluginsSideBySideInReplayExplainAndCheck) {
  const std::string two = "plugin:" + kBuiltin + ":paged,plugin:" + kBuiltin + ":mask-origin";
  const Result replay = kvfuzz("replay " + kWorked + " --engine " + two);
  EXPECT_EQ(replay.status, 1) << replay.out << replay.err;
  EXPECT_TRUE(has(replay.out, "FAIL " + kWorked + ": plugin:" + kBuiltin + ":mask-origin\n"))
      << replay.out;

  const std::string mixed =
      "plugin:" + kBuiltin + ":paged,flash,plugin:" + kBuiltin + ":contiguous";
  const Result passing = kvfuzz("replay " + kWorked + " --engine " + mixed);
  EXPECT_EQ(passing.status, 0) << passing.out << passing.err;
  EXPECT_TRUE(has(passing.out, "(5 rows, 3 engines)")) << passing.out;

  const Result explain = kvfuzz("explain " + kWorked + " --engine " + two);
  EXPECT_EQ(explain.status, 1) << explain.out << explain.err;
  EXPECT_EQ(count(explain.out, "\nengine plugin:"), 2) << explain.out;

  TempDir out("check");
  const Result check =
      kvfuzz("check --engine " + two + " --cases 20 --seed 1 --quiet --out " + out.path.string());
  EXPECT_EQ(check.status, 0) << check.out << check.err;  // paged passes, the mutant is rejected
  EXPECT_TRUE(has(check.out, "libkvfuzz_builtin_engines.so:paged")) << check.out;
  EXPECT_TRUE(has(check.out, "libkvfuzz_builtin_engines.so:mask-origin")) << check.out;
}

// list --engine: what a plugin declares, read back from the plugin itself.
TEST(SmallThings, ListEngineShowsAPluginsDeclarations) {
  const Result all = kvfuzz("list --engine plugin:" + kDeclaring + ":declares-all");
  EXPECT_EQ(all.status, 0) << all.err;
  for (const char* line :
       {"capabilities  truncate no, fork no\n",
        "numerics      output bf16, P rounded to bf16, score sums f16, value sums f16; with RoPE: "
        "rotated keys in storage yes",
        "; split partials normalised, combined by log-sum-exp, stored in bf16; P normalised "
        "first yes; RoPE tables in bf16; exp within 1024 ulps; q quantized to K's ggml blocks "
        "yes; a whole model's weights and activations in f32\n",
        "supports      storage f16, bf16; head_dim a multiple of 8, at most 256 (value_dim = "
        "head_dim); q heads at most 32; context at most 8192 tokens; RoPE only; no windows; "
        "attention features softcap, sinks, alibi, chunked_local, value_from_key, "
        "rope_interleaved, rope_dims; quantized KV "
        "fp8, ggml blocks, affine groups, per-channel keys; K and V in one format; one fp8 scale "
        "per tensor\n",
        "bitwise       batch, schedule, layout, poison\n"}) {
    EXPECT_TRUE(has(all.out, line)) << line << "\nin:\n" << all.out;
  }
  const Result none = kvfuzz("list --engine plugin:" + kDeclaring + ":declares-none,paged");
  EXPECT_EQ(none.status, 0) << none.err;
  EXPECT_EQ(count(none.out, "\nengine        "), 1) << none.out;  // two engines, one blank line
  for (const char* line :
       {"numerics      output f32, P not rounded, score sums f32, value sums f32; with RoPE: "
        "rotated keys in storage not said, rotated queries in storage not said, angles in double "
        "not said; split partials combined rescaled, stored in f32; P normalised first no; RoPE "
        "tables in f32; exp within 1 ulp; q quantized to K's ggml blocks no; a whole model's "
        "weights and activations in f32\n",
        "supports      storage f32, f16, bf16; head_dim any; q heads any; context any; attention "
        "features none; quantized KV none\n",
        "bitwise       none", "engine        paged (honest)\n",
        "capabilities  truncate yes, fork yes\n"}) {
    EXPECT_TRUE(has(none.out, line)) << line << "\nin:\n" << none.out;
  }
}

// An engine error is a call that failed: its report names the call, not the keys a row
// would have seen.
TEST(SmallThings, AnEngineErrorReportHasNoKeyRange) {
  const Result r = kvfuzz("replay " + kWorked + " --engine plugin:" + kMisbehaving + ":calls-fail");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "engine-error at op 0")) << r.out;
  EXPECT_FALSE(has(r.out, "should see keys")) << r.out;
  // A mismatch still names them.
  const Result mismatch = kvfuzz("replay " + kWorked + " --engine mask-origin");
  EXPECT_TRUE(has(mismatch.out, "this row should see keys at positions 0..3")) << mismatch.out;
}
#endif

// An exec command keeps its commas; a comma followed by a name starts the next engine.
TEST(SmallThings, AnExecEngineWithACommaInItsCommandBesideABuiltInOne) {
  const Result r = kvfuzz("replay " + kWorked + " --engine 'exec:env KVFUZZ_UNUSED=1,2 " +
                          kHonestExec + ",paged'");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "(5 rows, 2 engines)")) << r.out;
  const Result list = kvfuzz("list --engine 'exec:" + kHonestExec + "'");
  EXPECT_EQ(list.status, 0) << list.err;
  EXPECT_TRUE(has(list.out, "engine        exec:" + kHonestExec + " (honest)\n")) << list.out;
  EXPECT_TRUE(has(list.out, "\nnumerics      output f32")) << list.out;
}

TEST(SmallThings, ListEngineRefusesAnUnknownEngineInOneLine) {
  const Result r = kvfuzz("list --engine flsh");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
  EXPECT_TRUE(has(r.err, "unknown engine 'flsh' (did you mean 'flash'?)")) << r.err;
  // Without --engine: the table, and where the declarations are.
  EXPECT_TRUE(has(kvfuzz("list").out, "kvfuzz list --engine SPEC")) << kvfuzz("list").out;
}

// Files and directories mixed, each fixture once, a summary line per directory; a bad path
// among them is bad input.
TEST(SmallThings, ReplayTakesSeveralPaths) {
  const std::string model = (kSource / "corpus/model").string();
  const Result r = kvfuzz("replay " + kWorked + " " + model + " " + kWorked + " --engine paged");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "ok   " + kWorked), 1) << r.out;
  EXPECT_TRUE(has(r.out, (kSource / "corpus/seeds").string() + ": 1 fixtures, 1 passed")) << r.out;
  EXPECT_TRUE(has(r.out, model + ": ")) << r.out;
  const Result bad = kvfuzz("replay " + kWorked + " /no/such/fixture.json");
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(has(bad.err, "/no/such/fixture.json: no such fixture file or directory")) << bad.err;
}

// A fixture that describes its program but whose hand-written expect value is wrong is a
// mismatch (exit 1); an expect row the program cannot have is a malformed fixture (exit 2).
TEST(SmallThings, AFailedExpectIsAMismatchAMalformedExpectIsBadInput) {
  TempDir dir("expect");
  const fs::path wrong = worked_example_with(dir.path, "wrong-value.json", "[[7.5]]", "[[7.25]]");
  const Result mismatch = kvfuzz("replay " + wrong.string());
  EXPECT_EQ(mismatch.status, 1) << mismatch.out << mismatch.err;
  EXPECT_TRUE(has(mismatch.out, "the reference disagrees with the fixture's expect rows"))
      << mismatch.out;
  EXPECT_TRUE(has(mismatch.out, "hand value 7.25, reference 7.5")) << mismatch.out;
  EXPECT_EQ(mismatch.err, "");
  EXPECT_EQ(kvfuzz("explain " + wrong.string()).status, 1);

  const fs::path no_row =
      worked_example_with(dir.path, "no-such-row.json", "\"pos\": 4", "\"pos\": 9");
  const fs::path no_head =
      worked_example_with(dir.path, "no-head.json", "\"values\": [[12.4]]", "\"values\": []");
  for (const fs::path& bad : {no_row, no_head}) {
    const Result r = kvfuzz("replay " + bad.string());
    EXPECT_EQ(r.status, 2) << bad << r.out << r.err;
    EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
    EXPECT_TRUE(has(r.err, bad.string() + ": $.expect[4]")) << r.err;
    EXPECT_EQ(kvfuzz("explain " + bad.string()).status, 2);
  }
  // Both in one run: bad input outranks the mismatch.
  EXPECT_EQ(kvfuzz("replay " + dir.path.string()).status, 2);
  // replay --help says which is which.
  const Result help = kvfuzz("replay --help");
  EXPECT_TRUE(
      has(help.out, "the reference differs from a value of the fixture's hand-written expect"))
      << help.out;
  EXPECT_TRUE(has(help.out, "such as an expect row at a key its program does not produce"))
      << help.out;
}

// Shrinking a fixture that no move can reduce says so instead of "shrunk from X to X".
TEST(SmallThings, ShrinkSaysWhenTheFixtureIsAlreadyMinimal) {
  TempDir out("shrink");
  const std::string dirs =
      " --quiet --out " + out.path.string() + " --raw " + (out.path / "raw").string();
  const Result first = kvfuzz("shrink " + kWorked + " --engine mask-origin" + dirs);
  EXPECT_EQ(first.status, 1) << first.out << first.err;
  EXPECT_TRUE(has(first.out, "shrunk from 2 ops, 5 tokens to ")) << first.out;
  fs::path shrunk;
  for (const auto& entry : fs::directory_iterator(out.path)) {
    if (entry.is_regular_file()) shrunk = entry.path();
  }
  ASSERT_FALSE(shrunk.empty());
  const Result again = kvfuzz("shrink " + shrunk.string() + " --engine mask-origin" + dirs);
  EXPECT_EQ(again.status, 1) << again.out << again.err;
  EXPECT_TRUE(has(again.out, "already minimal for the moves at ")) << again.out;
  EXPECT_FALSE(has(again.out, "shrunk from")) << again.out;
  EXPECT_TRUE(has(slurp(shrunk), "By kvfuzz shrink: already minimal")) << slurp(shrunk);
}

}  // namespace
