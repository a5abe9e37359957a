// Fixture format v1: canonical round trips, strict rejection, cross-field validation and
// atomic saving (docs/fixture-format.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kvfuzz/fixture_io.h"
#include "kvfuzz/limits.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;

// The worked example of docs/architecture.md, in canonical form.
const std::string kWorkedExample = R"({
  "kvfuzz_fixture": 1,
  "name": "worked-example",
  "note": "One head, head_dim 1, q = k = 0 so every visible key has equal weight. Values 2, 4, 8, 16, 32 at positions 0..4; three tokens are cached, then a chunk holds the queries at positions 3 and 4. Full prefix: (2+4+8+16)/4 = 7.5 and (2+4+8+16+32)/5 = 12.4. A mask whose origin restarts at the chunk gives 2 and 3.",
  "layout": {
    "q_heads": 1,
    "kv_heads": 1,
    "head_dim": 1,
    "value_dim": 1,
    "page_size": 16,
    "dtype": "f32"
  },
  "tokens": {
    "explicit": [
      {"q": [[0]], "k": [[0]], "v": [[2]]},
      {"q": [[0]], "k": [[0]], "v": [[4]]},
      {"q": [[0]], "k": [[0]], "v": [[8]]},
      {"q": [[0]], "k": [[0]], "v": [[16]]},
      {"q": [[0]], "k": [[0]], "v": [[32]]}
    ]
  },
  "sequences": 1,
  "program": [
    {"op": "append", "seq": 0, "tokens": [0, 1, 2]},
    {"op": "append", "seq": 0, "tokens": [3, 4]}
  ],
  "placement": {
    "page_order": "identity",
    "poison": "nan"
  },
  "expect": [
    {"seq": 0, "epoch": 0, "pos": 3, "values": [[7.5]]},
    {"seq": 0, "epoch": 0, "pos": 4, "values": [[12.4]]}
  ],
  "provenance": {
    "source": "hand"
  }
}
)";

// A scenario that uses every feature of the format.
Scenario every_feature() {
  Scenario s;
  s.name = "every-feature";
  s.note = "generated tokens, RoPE, window, scale, a two-chunk step, a reset, explicit pages";
  s.layout.q_heads = 4;
  s.layout.kv_heads = 2;
  s.layout.head_dim = 4;
  s.layout.value_dim = 3;
  s.layout.page_size = 2;
  s.layout.dtype = DType::bf16;
  s.layout.rope_theta = 10000.0;
  s.layout.window = 3;
  s.layout.scale = 0.375;
  s.tokens = GeneratedTokens{18446744073709551615ull, 6, Distribution::dyadic, true};
  s.sequences = 2;
  s.program = {Op::append(0, {0, 1, 2}), Op::step({Chunk{1, {3, 4}}, Chunk{0, {5}}}), Op::reset(0),
               Op::append(0, {5, 4, 3, 2, 1})};
  // Sequence 0: epochs of 4 and 5 tokens (3 pages), sequence 1: 2 tokens (1 page), +1.
  s.placement.order = PageOrder::explicit_list;
  s.placement.pages = {4, 0, 3, 1, 2};
  s.placement.pool_pages = 5;
  s.placement.poison = Poison::neg_inf;
  s.expect = {ExpectedRow{1, 0, 1, {{0.5, -1, 2}, {0, 0, 0}, {1e-3, 3, -0.0}, {7, 8, 9}}},
              ExpectedRow{0, 1, 4, {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12.25}}}};
  s.provenance.source = "shrink";
  s.provenance.engine = "cpu-paged";
  s.provenance.property = "prefix_equivalence";
  s.provenance.seed = 42;
  s.provenance.failure = "seq 0 epoch 1 pos 4 head 0 dim 0: got 2, expected 3";
  s.provenance.kvfuzz_version = "0.1.0";
  return s;
}

const std::string kEveryFeature = R"({
  "kvfuzz_fixture": 1,
  "name": "every-feature",
  "note": "generated tokens, RoPE, window, scale, a two-chunk step, a reset, explicit pages",
  "layout": {
    "q_heads": 4,
    "kv_heads": 2,
    "head_dim": 4,
    "value_dim": 3,
    "page_size": 2,
    "dtype": "bf16",
    "rope_theta": 10000,
    "window": 3,
    "scale": 0.375
  },
  "tokens": {
    "generated": {
      "seed": 18446744073709551615,
      "count": 6,
      "distribution": "dyadic",
      "zero_scores": true
    }
  },
  "sequences": 2,
  "program": [
    {"op": "append", "seq": 0, "tokens": [0, 1, 2]},
    {"op": "step", "chunks": [{"seq": 1, "tokens": [3, 4]}, {"seq": 0, "tokens": [5]}]},
    {"op": "reset", "seq": 0},
    {"op": "append", "seq": 0, "tokens": [5, 4, 3, 2, 1]}
  ],
  "placement": {
    "page_order": [4, 0, 3, 1, 2],
    "pool_pages": 5,
    "poison": "-inf"
  },
  "expect": [
    {"seq": 1, "epoch": 0, "pos": 1, "values": [[0.5, -1, 2], [0, 0, 0], [0.001, 3, -0.0], [7, 8, 9]]},
    {"seq": 0, "epoch": 1, "pos": 4, "values": [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12.25]]}
  ],
  "provenance": {
    "source": "shrink",
    "engine": "cpu-paged",
    "property": "prefix_equivalence",
    "seed": 42,
    "failure": "seq 0 epoch 1 pos 4 head 0 dim 0: got 2, expected 3",
    "kvfuzz_version": "0.1.0"
  }
}
)";

std::string replace(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The FixtureError message of parsing `text` as "f.json", or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_fixture(text, "f.json");
  } catch (const FixtureError& error) {
    return error.what();
  }
  return "";
}

// Doubles compared bit for bit (so -0.0 != 0.0).
void expect_same_bits(const std::vector<std::vector<double>>& a,
                      const std::vector<std::vector<double>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (size_t j = 0; j < a[i].size(); ++j) {
      EXPECT_EQ(std::bit_cast<uint64_t>(a[i][j]), std::bit_cast<uint64_t>(b[i][j]))
          << a[i][j] << " vs " << b[i][j];
    }
  }
}

fs::path malformed_dir() {
  return fs::path(KVFUZZ_SOURCE_DIR) / "tests" / "corpus" / "malformed";
}

struct ManifestRow {
  std::string file, path, substring;
};

std::vector<ManifestRow> read_manifest() {
  std::ifstream in(malformed_dir() / "EXPECTED.tsv");
  EXPECT_TRUE(in) << "cannot open " << (malformed_dir() / "EXPECTED.tsv");
  std::vector<ManifestRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    ManifestRow row;
    std::getline(fields, row.file, '\t');
    std::getline(fields, row.path, '\t');
    std::getline(fields, row.substring);
    EXPECT_FALSE(row.substring.empty()) << "manifest line without three fields: " << line;
    rows.push_back(row);
  }
  return rows;
}

// A fresh scratch directory in the system temp dir, unique to this process (test runs of
// several build directories may overlap).
fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvfuzz_test_fixture_" + name + "_" +
                                                    std::to_string(static_cast<long>(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// ---------------------------------------------------------------------------------------
// Round trips

TEST(FixtureRoundTrip, TruncateAndFork) {
  Scenario s;
  s.name = "truncate-and-fork";
  s.sequences = 2;
  s.tokens = GeneratedTokens{3, 5, Distribution::small_int, false};
  s.program = {Op::append(0, {0, 1, 2}), Op::fork(0, 1), Op::truncate(0, 1), Op::append(0, {3}),
               Op::append(1, {4})};
  const std::string text = write_fixture(s);
  EXPECT_NE(text.find(R"({"op": "truncate", "seq": 0, "keep": 1})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"({"op": "fork", "src": 0, "dst": 1})"), std::string::npos) << text;
  const Scenario back = parse_fixture(text, "truncate-and-fork.json");
  EXPECT_EQ(back, s);
  EXPECT_EQ(write_fixture(back), text);
}

TEST(FixtureRoundTrip, WorkedExampleIsCanonical) {
  const Scenario s = parse_fixture(kWorkedExample, "worked.json");
  EXPECT_EQ(s.name, "worked-example");
  EXPECT_EQ(s.layout, Layout{});
  const auto& tokens = std::get<std::vector<ExplicitToken>>(s.tokens);
  ASSERT_EQ(tokens.size(), 5u);
  const double values[] = {2, 4, 8, 16, 32};
  for (size_t t = 0; t < 5; ++t) {
    EXPECT_EQ(tokens[t].q, (std::vector<std::vector<double>>{{0}}));
    EXPECT_EQ(tokens[t].k, (std::vector<std::vector<double>>{{0}}));
    EXPECT_EQ(tokens[t].v, (std::vector<std::vector<double>>{{values[t]}}));
  }
  EXPECT_EQ(s.sequences, 1);
  EXPECT_EQ(s.program, (std::vector<Op>{Op::append(0, {0, 1, 2}), Op::append(0, {3, 4})}));
  EXPECT_EQ(s.placement, Placement{});
  ASSERT_EQ(s.expect.size(), 2u);
  EXPECT_EQ(s.expect[0], (ExpectedRow{0, 0, 3, {{7.5}}}));
  EXPECT_EQ(s.expect[1], (ExpectedRow{0, 0, 4, {{12.4}}}));
  EXPECT_EQ(s.provenance, Provenance{});
  EXPECT_EQ(write_fixture(s), kWorkedExample);
}

TEST(FixtureRoundTrip, EveryFeature) {
  const Scenario s = every_feature();
  const auto error = validate(s);
  EXPECT_FALSE(error) << error->path << ": " << error->message;
  const std::string text = write_fixture(s);
  EXPECT_EQ(text, kEveryFeature);
  const Scenario back = parse_fixture(text, "every.json");
  EXPECT_EQ(back, s);
  expect_same_bits(back.expect[0].values, s.expect[0].values);
  EXPECT_EQ(write_fixture(back), text);
}

TEST(FixtureRoundTrip, EveryPoisonAndPageOrder) {
  for (Poison poison : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    for (PageOrder order : {PageOrder::identity, PageOrder::reversed, PageOrder::explicit_list}) {
      for (bool with_pool : {false, true}) {
        Scenario s = every_feature();
        s.placement = Placement{};
        s.placement.order = order;
        s.placement.poison = poison;
        if (order == PageOrder::explicit_list) s.placement.pages = {0, 1, 2, 3, 4, 5, 6};
        if (with_pool) s.placement.pool_pages = 7;
        ASSERT_FALSE(validate(s));
        const std::string text = write_fixture(s);
        EXPECT_NE(text.find(std::string("\"poison\": \"") + std::string(poison_name(poison))),
                  std::string::npos);
        const Scenario back = parse_fixture(text, "p.json");
        EXPECT_EQ(back, s) << text;
        EXPECT_EQ(write_fixture(back), text);
      }
    }
  }
}

// Every thread order round-trips; thread order is written as nothing (fixtures from before
// thread orders read and write as they did), the others as one line, a seed with random.
TEST(FixtureRoundTrip, EveryThreadOrder) {
  for (const ThreadOrder order : kThreadOrders) {
    Scenario s = every_feature();
    s.placement.threads = {order, order == ThreadOrder::random ? 18446744073709551615ull : 0};
    const std::string text = write_fixture(s);
    const std::string line =
        order == ThreadOrder::random
            ? "\"threads\": {\"order\": \"random\", \"seed\": 18446744073709551615}"
            : "\"threads\": {\"order\": \"" + std::string(thread_order_name(order)) + "\"}";
    EXPECT_EQ(text.find(line) != std::string::npos, order != ThreadOrder::thread) << text;
    EXPECT_EQ(text.find("threads") != std::string::npos, order != ThreadOrder::thread) << text;
    const Scenario back = parse_fixture(text, "t.json");
    EXPECT_EQ(back, s) << text;
    EXPECT_EQ(write_fixture(back), text);
  }
  // Spelled out, thread order reads as the default.
  Scenario s = every_feature();
  std::string text = write_fixture(s);
  const std::string poison = "\"poison\": \"" + std::string(poison_name(s.placement.poison)) + "\"";
  text.replace(text.find(poison), poison.size(), poison + ", \"threads\": {\"order\": \"thread\"}");
  EXPECT_EQ(parse_fixture(text, "t.json"), s);
}

TEST(FixtureRoundTrip, ExplicitMultiHeadTokensAndEveryDtype) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    Scenario s;
    s.name = "multi-head";
    s.layout.q_heads = 4;
    s.layout.kv_heads = 2;
    s.layout.head_dim = 2;
    s.layout.value_dim = 3;
    s.layout.page_size = 1;
    s.layout.dtype = dtype;
    // The largest magnitudes each dtype stores finitely (f16 stops at 65504).
    const bool f16 = dtype == DType::f16;
    const double big = f16 ? 65504 : 1e16;
    std::vector<ExplicitToken> tokens;
    for (double t : {0.0, 1.0, 2.0}) {
      ExplicitToken token;
      token.q = {{0.25 * t, -1}, {2, 3}, {-0.0, 1e-300}, {big, -big}};
      token.k = {{1.0 / 3, t}, {5e-324, 0.1}};
      token.v = {{t, t + 0.5, -t}, {1e-7, f16 ? 12345.6789 : 123456.789, f16 ? -2.5e4 : -2.5e10}};
      tokens.push_back(token);
    }
    s.tokens = tokens;
    s.program = {Op::append(0, {2, 1, 0, 0})};
    s.expect = {ExpectedRow{0, 0, 0, {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}}}};
    ASSERT_FALSE(validate(s));
    const std::string text = write_fixture(s);
    const Scenario back = parse_fixture(text, "m.json");
    EXPECT_EQ(back, s);
    const auto& a = std::get<std::vector<ExplicitToken>>(s.tokens);
    const auto& b = std::get<std::vector<ExplicitToken>>(back.tokens);
    for (size_t t = 0; t < a.size(); ++t) {
      expect_same_bits(a[t].q, b[t].q);
      expect_same_bits(a[t].k, b[t].k);
      expect_same_bits(a[t].v, b[t].v);
    }
    EXPECT_EQ(write_fixture(back), text);
  }
}

TEST(FixtureWriter, NumbersUseCanonicalSpelling) {
  Scenario s = parse_fixture(kWorkedExample, "worked.json");
  s.layout.value_dim = 10;
  auto& tokens = std::get<std::vector<ExplicitToken>>(s.tokens);
  for (auto& token : tokens)
    token.v = {
        {2, -4, -0.0, 0.1, 1e16, 9007199254740992.0, 9007199254740991.0, 1.5e-7, 1.0 / 3, 0}};
  s.expect.clear();
  ASSERT_FALSE(validate(s));
  const std::string text = write_fixture(s);
  EXPECT_NE(text.find("\"v\": [[2, -4, -0.0, 0.1, 1e+16, 9007199254740992, 9007199254740991, "
                      "1.5e-07, 0.3333333333333333, 0]]"),
            std::string::npos)
      << text;
  const Scenario back = parse_fixture(text, "n.json");
  const auto& b = std::get<std::vector<ExplicitToken>>(back.tokens);
  expect_same_bits(b[0].v, tokens[0].v);
  EXPECT_EQ(write_fixture(back), text);
}

// Each number the writer can meet, with the exact spelling it must produce: integers below
// 2^53 without exponent (100000, not 1e+05), everything else the shortest round-trip form.
// Expect rows take any finite number, so 1e300 fits there.
TEST(FixtureWriter, NumberSpellingIsPinned) {
  const std::vector<std::pair<double, std::string>> cases = {
      {100000.0, "100000"},
      {1e15, "1000000000000000"},
      {9007199254740991.0, "9007199254740991"},  // 2^53 - 1: the integer branch
      {9007199254740992.0, "9007199254740992"},  // 2^53: shortest form, still no exponent
      {1e300, "1e+300"},
      {-0.0, "-0.0"},
      {0.1, "0.1"},
      {1e-7, "1e-07"},
      {123456.5, "123456.5"},
      {-100000.0, "-100000"},
  };
  for (const auto& [value, spelling] : cases) {
    SCOPED_TRACE(spelling);
    Scenario s = parse_fixture(kWorkedExample, "worked.json");
    s.expect[0].values = {{value}};
    ASSERT_FALSE(validate(s));
    const std::string text = write_fixture(s);
    EXPECT_NE(text.find(R"("pos": 3, "values": [[)" + spelling + "]]}"), std::string::npos) << text;
    const Scenario back = parse_fixture(text, "n.json");
    expect_same_bits(back.expect[0].values, s.expect[0].values);
    EXPECT_EQ(write_fixture(back), text);
  }
}

TEST(FixtureWriter, StringsAreEscapedAndRoundTrip) {
  Scenario s = parse_fixture(kWorkedExample, "worked.json");
  s.name = "quote \" backslash \\ slash / caf\xC3\xA9 \xF0\x9F\x98\x80";
  s.note = "line 1\nline 2\ttab \x01 bell\x07 del\x7F cr\r ff\f bs\b";
  s.provenance.failure = "";
  ASSERT_FALSE(validate(s));
  const std::string text = write_fixture(s);
  EXPECT_NE(text.find(R"("name": "quote \" backslash \\ slash / café 😀")"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("note": "line 1\nline 2\ttab \u0001 bell\u0007 del)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(cr\r ff\f bs\b")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("failure": "")"), std::string::npos) << text;
  const Scenario back = parse_fixture(text, "s.json");
  EXPECT_EQ(back, s);
  EXPECT_EQ(write_fixture(back), text);
}

TEST(FixtureWriter, EveryControlCharacterIsEscaped) {
  Scenario s = parse_fixture(kWorkedExample, "worked.json");
  s.note.clear();
  for (char c = 1; c < 0x20; ++c) s.note += c;
  const std::string text = write_fixture(s);
  EXPECT_NE(text.find(R"("note": "\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r)"
                      R"(\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018)"
                      R"(\u0019\u001a\u001b\u001c\u001d\u001e\u001f")"),
            std::string::npos)
      << text;
  EXPECT_EQ(parse_fixture(text, "c.json"), s);
}

TEST(FixtureWriter, RefusesTextThatIsNotUtf8) {
  Scenario s = parse_fixture(kWorkedExample, "worked.json");
  s.name = "bad \xC3";  // validate() rejects it; the writer must not write it either
  try {
    write_fixture(s);
    FAIL() << "wrote invalid UTF-8";
  } catch (const FixtureError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("cannot write a string that is not valid UTF-8", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(FixtureWriter, OptionalFieldsOnlyWhenSet) {
  Scenario s;
  s.name = "minimal";
  s.tokens = GeneratedTokens{1, 2, Distribution::small_int, false};
  s.program = {Op::append(0, {0, 1})};
  ASSERT_FALSE(validate(s));
  EXPECT_EQ(write_fixture(s), R"({
  "kvfuzz_fixture": 1,
  "name": "minimal",
  "layout": {
    "q_heads": 1,
    "kv_heads": 1,
    "head_dim": 1,
    "value_dim": 1,
    "page_size": 16,
    "dtype": "f32"
  },
  "tokens": {
    "generated": {
      "seed": 1,
      "count": 2,
      "distribution": "small-int"
    }
  },
  "sequences": 1,
  "program": [
    {"op": "append", "seq": 0, "tokens": [0, 1]}
  ],
  "placement": {
    "page_order": "identity",
    "poison": "nan"
  },
  "provenance": {
    "source": "hand"
  }
}
)");
  s.program.clear();
  EXPECT_NE(write_fixture(s).find("\"program\": [],\n"), std::string::npos);
  EXPECT_EQ(parse_fixture(write_fixture(s), "e.json"), s);
}

TEST(FixtureParser, AcceptsNonCanonicalInputAndFillsDefaults) {
  // Compact, reordered, without the optional fields: the same scenario as the worked
  // example minus note, placement, expect and provenance.
  const std::string compact =
      R"({"program":[{"tokens":[0,1,2],"seq":0,"op":"append"},{"op":"append","seq":0,)"
      R"("tokens":[3,4]}],"sequences":1,"tokens":{"explicit":[{"v":[[2.0]],"k":[[0]],"q":[[0]]},)"
      R"({"q":[[0]],"k":[[0]],"v":[[4]]},{"q":[[0]],"k":[[0]],"v":[[8]]},)"
      R"({"q":[[0]],"k":[[0]],"v":[[16]]},{"q":[[0]],"k":[[0]],"v":[[32e0]]}]},)"
      R"("layout":{"dtype":"f32","page_size":16,"value_dim":1,"head_dim":1,"kv_heads":1,)"
      R"("q_heads":1},"name":"worked-example","kvfuzz_fixture":1})";
  Scenario expected = parse_fixture(kWorkedExample, "worked.json");
  expected.note.clear();
  expected.expect.clear();
  EXPECT_EQ(parse_fixture(compact, "compact.json"), expected);
  // Optional fields given with their default values are accepted (and not written back).
  const std::string defaults =
      R"({"kvfuzz_fixture": 1, "name": "d", "note": "", "layout": {"q_heads": 1, "kv_heads": 1,)"
      R"( "head_dim": 1, "value_dim": 1, "page_size": 16, "dtype": "f32"}, "tokens": {"generated":)"
      R"( {"seed": 1, "count": 2, "distribution": "small-int", "zero_scores": false}},)"
      R"( "sequences": 1, "program": [], "placement": {}, "expect": [], "provenance": {"source":)"
      R"( "hand"}})";
  Scenario minimal;
  minimal.name = "d";
  minimal.tokens = GeneratedTokens{1, 2, Distribution::small_int, false};
  EXPECT_EQ(parse_fixture(defaults, "d.json"), minimal);
  EXPECT_EQ(write_fixture(parse_fixture(defaults, "d.json")).find("note"), std::string::npos);
  const Scenario zero_false = parse_fixture(
      replace(write_fixture(every_feature()), R"("zero_scores": true)", R"("zero_scores": false)"),
      "z.json");
  EXPECT_FALSE(std::get<GeneratedTokens>(zero_false.tokens).zero_scores);
}

TEST(FixtureParser, LargestSeedAndIntegersAtTheLimits) {
  std::string text = write_fixture(every_feature());
  EXPECT_EQ(std::get<GeneratedTokens>(parse_fixture(text, "s.json").tokens).seed,
            18446744073709551615ull);
  EXPECT_NE(error_of(replace(text, "18446744073709551615", "18446744073709551616"))
                .find("f.json: $.tokens.generated.seed: expected an unsigned 64-bit integer"),
            std::string::npos);
  // seq beyond the int range is rejected by the reader, not wrapped around.
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("seq": 0, "tokens": [3, 4])",
                             R"("seq": 4294967296, "tokens": [3, 4])")),
            "f.json: $.program[1].seq: expected an integer, got 4294967296");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("pos": 4)", R"("pos": 3.5)")),
            "f.json: $.expect[1].pos: expected an integer, got 3.5");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("pos": 4)", R"("pos": 4e0)")),
            "f.json: $.expect[1].pos: expected an integer, got 4.0 (integers are written without "
            "a fraction or exponent)");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("kvfuzz_fixture": 1)", R"("kvfuzz_fixture": 1.0)")),
            "f.json: $.kvfuzz_fixture: expected format version 1 to 8, got 1.0");
}

// ---------------------------------------------------------------------------------------
// Errors

TEST(FixtureErrors, ExactMessages) {
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("q_heads": 1)", R"("qheads": 1)")),
            "f.json: $.layout.qheads: unknown field; expected one of q_heads, kv_heads, head_dim, "
            "value_dim, page_size, dtype, rope_theta, rope_style, rope_dims, window, scale, "
            "softcap, sinks, alibi, chunked_local, k_format, v_format, value_from_key");
  EXPECT_EQ(error_of(replace(kWorkedExample, "    \"q_heads\": 1,\n", "")),
            "f.json: $.layout.q_heads: missing; expected an integer in [1, 128]");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("seq": 0, "tokens": [3, 4])",
                             R"("seq": 3, "tokens": [3, 4])")),
            "f.json: $.program[1].seq: expected a sequence in [0, 1) (the fixture declares 1 "
            "sequence), got 3");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("q": [[0]], "k": [[0]], "v": [[2]])",
                             R"("q": [[0, 1]], "k": [[0]], "v": [[2]])")),
            "f.json: $.tokens.explicit[0].q[0]: expected 1 number (head_dim), got 2");
  Scenario s = every_feature();
  s.layout.kv_heads = 3;
  s.placement = Placement{};
  EXPECT_EQ(error_of(write_fixture(s)),
            "f.json: $.layout.kv_heads: expected a divisor of q_heads (4), got 3");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("dtype": "f32")", R"("dtype": ["f32", "f16"])")),
            R"(f.json: $.layout.dtype: expected one of "f32", "f16", "bf16", got ["f32","f16"])");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"("sequences": 1)", R"("sequences": [1])")),
            "f.json: $.sequences: expected an integer in [1, 256], got [1]");
  EXPECT_EQ(error_of(replace(kWorkedExample, R"({"q": [[0]], "k": [[0]], "v": [[8]]})", "8")),
            "f.json: $.tokens.explicit[2]: expected an object, got 8");
  EXPECT_EQ(error_of("{\n  \"kvfuzz_fixture\": 1,\n  \"name\": \"x\",,\n}"),
            "f.json: line 3, column 15: invalid JSON (syntax error while parsing object key - "
            "unexpected ','; expected string literal)");
  EXPECT_EQ(error_of(""),
            "f.json: line 1, column 1: invalid JSON (syntax error while parsing value - unexpected "
            "end of input; expected '[', '{', or a literal)");
}

// The magnitude of a score spread (generate/score_spreads.h): written only when set, read
// back as written, bounded by limits::kMaxQkLog2.
TEST(FixtureRoundTrip, QkMagnitude) {
  Scenario s;
  s.name = "magnitude";
  s.tokens = GeneratedTokens{.seed = 9, .count = 2, .qk_log2 = 5};
  s.program = {Op::append(0, {0, 1})};
  ASSERT_FALSE(validate(s));
  const std::string text = write_fixture(s);
  EXPECT_NE(text.find(R"("qk_log2": 5)"), std::string::npos) << text;
  EXPECT_EQ(parse_fixture(text, "m.json"), s);
  EXPECT_EQ(error_of(replace(text, R"("qk_log2": 5)", R"("qk_log2": 13)")),
            "f.json: $.tokens.generated.qk_log2: expected an integer in [0, 12], got 13");
  EXPECT_EQ(error_of(replace(text, R"("qk_log2": 5)", R"("qk_log2": -1)")),
            "f.json: $.tokens.generated.qk_log2: expected an integer in [0, 12], got -1");
  std::get<GeneratedTokens>(s.tokens).qk_log2 = 0;
  EXPECT_EQ(write_fixture(s).find("qk_log2"), std::string::npos);
}

TEST(FixtureErrors, VersionIsCheckedBeforeUnknownFields) {
  const std::string v9 =
      replace(replace(kWorkedExample, R"("kvfuzz_fixture": 1)", R"("kvfuzz_fixture": 9)"),
              R"("sequences": 1,)", R"("sequences": 1, "fork_points": [],)");
  EXPECT_EQ(error_of(v9), "f.json: $.kvfuzz_fixture: expected format version 1 to 8, got 9");
}

// Format version 8: keys quantized by channel. Written in version 8 (a name alone for group
// 32), read back equal; a version 7 fixture with one, a per-channel V, a group outside the
// four, and a truncate into a whole group are each one line naming the field.
TEST(FixtureKvFormats, Version8HoldsKeysQuantizedByChannel) {
  Scenario s = parse_fixture(kWorkedExample, "f.json");
  s.layout.k_format = KvFormat{KvQuant::channel_u4, {}, 16};
  ASSERT_FALSE(validate(s));
  const std::string text = write_fixture(s);
  EXPECT_NE(text.find(R"("kvfuzz_fixture": 8)"), std::string::npos);
  EXPECT_NE(text.find(R"("k_format": {"type": "channel_u4", "group": 16})"), std::string::npos)
      << text;
  EXPECT_EQ(parse_fixture(text, "f.json"), s);
  s.layout.k_format.group = 32;
  EXPECT_NE(write_fixture(s).find(R"("k_format": "channel_u4")"), std::string::npos);
  EXPECT_EQ(error_of(replace(text, R"("kvfuzz_fixture": 8)", R"("kvfuzz_fixture": 7)")),
            "f.json: $.layout.k_format.type: expected no channel_u4 in a version 7 fixture (the "
            "per-channel KV formats need \"kvfuzz_fixture\": 8), got \"channel_u4\"");
  EXPECT_EQ(error_of(replace(text, R"("group": 16})", R"("group": 8})")),
            "f.json: $.layout.k_format.group: expected 16, 32, 64 or 128 positions, got 8");
  Scenario v = s;
  v.layout.v_format = KvFormat{KvQuant::channel_u8, {}, 32};
  ASSERT_TRUE(validate(v));
  EXPECT_EQ(validate(v)->path, "$.layout.v_format");
  // A truncate keeping part of a whole group: 40 tokens in groups of 16, keep 20.
  Scenario t = s;
  t.layout.k_format.group = 16;
  t.tokens = GeneratedTokens{.seed = 1, .count = 40};
  std::vector<int> ids(40);
  for (int i = 0; i < 40; ++i) ids[static_cast<size_t>(i)] = i;
  t.program = {Op::append(0, ids), Op::truncate(0, 20), Op::append(0, {1})};
  t.expect.clear();
  ASSERT_TRUE(validate(t));
  EXPECT_EQ(validate(t)->path, "$.program[1].keep");
  EXPECT_EQ(validate(t)->message,
            "a multiple of k_format's group (16) or a keep inside the last, unfinished group "
            "(sequence 0 holds 40, whose groups up to 32 are quantized by channel), got 20");
  t.program[1] = Op::truncate(0, 35);  // inside the unfinished group: fine
  EXPECT_FALSE(validate(t));
  t.program[1] = Op::truncate(0, 32);
  EXPECT_FALSE(validate(t));
}

// Format version 2: the attention features. A version 1 fixture reads as before (and a
// scenario without features is written as version 1); version 2 holds the features, each
// validated with one line; "standard" ALiBi reads as the standard slopes and is written so.
TEST(FixtureFeatures, Version2HoldsTheAttentionFeaturesAndVersion1ReadsUnchanged) {
  EXPECT_EQ(write_fixture(parse_fixture(kWorkedExample, "f.json")), kWorkedExample);
  const std::string layout_end = R"("dtype": "f32")";
  const auto with = [&](const std::string& fields, int version = 2) {
    return replace(replace(kWorkedExample, layout_end, layout_end + ",\n    " + fields),
                   R"("kvfuzz_fixture": 1)", R"("kvfuzz_fixture": )" + std::to_string(version));
  };
  const std::string all = with(R"("softcap": 30,)"
                               "\n    "
                               R"("sinks": [0.5],)"
                               "\n    "
                               R"("alibi": "standard",)"
                               "\n    "
                               R"("chunked_local": 3)");
  const Scenario s = parse_fixture(all, "f.json");
  EXPECT_EQ(s.layout.softcap, 30.0);
  EXPECT_EQ(s.layout.sinks, std::vector<double>{0.5});
  EXPECT_EQ(s.layout.alibi, std::vector<double>{0x1p-8});  // one head: 2^(-8 / 1)
  EXPECT_EQ(s.layout.chunked_local, 3);
  EXPECT_EQ(write_fixture(s), all);
  EXPECT_EQ(fixture_format_version(s), 2);
  // Explicit slopes that are not the standard ones stay a list.
  Scenario own = s;
  own.layout.alibi = {0.25};
  EXPECT_NE(write_fixture(own).find(R"("alibi": [0.25])"), std::string::npos);
  EXPECT_EQ(parse_fixture(write_fixture(own), "f.json"), own);

  EXPECT_EQ(error_of(with(R"("softcap": 30)", 1)),
            "f.json: $.layout.softcap: expected no \"softcap\" in a version 1 fixture (attention "
            "features need \"kvfuzz_fixture\": 2), got 30");
  EXPECT_EQ(error_of(with(R"("softcap": 0)")),
            "f.json: $.layout.softcap: expected a finite number in (0, 10000], got 0");
  EXPECT_EQ(error_of(with(R"("sinks": [1, 2])")),
            "f.json: $.layout.sinks: expected one number per q head (1), got 2");
  EXPECT_EQ(error_of(with(R"("alibi": [-1])")),
            "f.json: $.layout.alibi[0]: expected a finite number in [0, 256], got -1");
  EXPECT_EQ(error_of(with(R"("alibi": "steep")")),
            "f.json: $.layout.alibi: expected one of \"standard\", got \"steep\"");
  EXPECT_EQ(error_of(with(R"("chunked_local": 0)")),
            "f.json: $.layout.chunked_local: expected an integer in [1, 16384], got 0");
}

// The worked example as a fixture of `version` with `fields` added to its layout and its
// `dim` line ("value_dim": 1 or "head_dim": 1) replaced by `dims`.
std::string worked_example_with(const std::string& fields, int version, const std::string& dim,
                                const std::string& dims) {
  const std::string layout_end = R"("dtype": "f32")";
  return replace(
      replace(replace(kWorkedExample, layout_end, layout_end + ",\n    " + fields),
              R"("kvfuzz_fixture": 1)", R"("kvfuzz_fixture": )" + std::to_string(version)),
      dim, dims);
}

TEST(FixtureKvFormats, Version3HoldsQuantizedCachesAndOlderVersionsReadUnchanged) {
  const auto with = [](const std::string& fields, int version = 3,
                       const std::string& dims = R"("value_dim": 1)") {
    return worked_example_with(fields, version, R"("value_dim": 1)", dims);
  };
  const std::string fp8 = with(R"("k_format": {"type": "fp8_e5m2", "scale": 0.5})");
  const Scenario s = parse_fixture(fp8, "f.json");
  EXPECT_EQ(s.layout.k_format, (KvFormat{KvQuant::fp8_e5m2, {0.5}}));
  EXPECT_FALSE(s.layout.v_format.quantized());
  EXPECT_EQ(fixture_format_version(s), 3);
  EXPECT_EQ(write_fixture(s), fp8);
  // A format without a scale is its name; per-kv-head scales are a list.
  Scenario blocks = s;
  blocks.layout.value_dim = 32;
  blocks.tokens = GeneratedTokens{.seed = 1, .count = 5};
  blocks.expect.clear();
  blocks.layout.k_format.scale = {0.25, 4};
  blocks.layout.kv_heads = 2;
  blocks.layout.q_heads = 2;
  blocks.layout.v_format = KvFormat{KvQuant::q4_0, {}};
  const std::string written = write_fixture(blocks);
  EXPECT_NE(written.find(R"("k_format": {"type": "fp8_e5m2", "scale": [0.25, 4]})"),
            std::string::npos)
      << written;
  EXPECT_NE(written.find(R"("v_format": "q4_0")"), std::string::npos) << written;
  EXPECT_EQ(parse_fixture(written, "f.json"), blocks);
  // Without formats the fixture is written as before.
  EXPECT_EQ(write_fixture(parse_fixture(kWorkedExample, "f.json")), kWorkedExample);

  EXPECT_EQ(error_of(with(R"("k_format": "q8_0")", 2)),
            "f.json: $.layout.k_format: expected no \"k_format\" in a version 2 fixture "
            "(quantized KV caches need \"kvfuzz_fixture\": 3), got \"q8_0\"");
  EXPECT_EQ(error_of(with(R"("k_format": "q2_k")")),
            "f.json: $.layout.k_format: expected one of \"fp8_e4m3fn\", \"fp8_e5m2\", "
            "\"q8_0\", \"q4_0\", \"q4_1\", \"q5_0\", \"q5_1\", \"affine2\", \"affine4\", "
            "\"affine8\", \"channel_u8\", \"channel_u4\", got \"q2_k\"");
  EXPECT_EQ(error_of(with(R"("k_format": "q8_0")")),
            "f.json: $.layout.k_format: expected a head_dim that is a multiple of 32 for q8_0 "
            "(ggml quantizes blocks of 32), got head_dim 1");
  EXPECT_EQ(error_of(with(R"("v_format": {"type": "q8_0", "scale": 2})", 3, R"("value_dim": 32)")),
            "f.json: $.layout.v_format.scale: expected no scale for q8_0 (a ggml block stores "
            "its own)");
  EXPECT_EQ(error_of(with(R"("k_format": {"type": "fp8_e4m3fn", "scale": 0.1})")),
            "f.json: $.layout.k_format.scale: expected a number in [2^-32, 2^32] that f32 "
            "holds exactly, got 0.1");
  EXPECT_EQ(error_of(with(R"("k_format": {"type": "fp8_e4m3fn", "scale": [1, 2]})")),
            "f.json: $.layout.k_format.scale: expected one number, or one per kv head (1), "
            "got 2");
  EXPECT_EQ(error_of(with(R"("k_format": {"type": "fp8_e4m3fn", "bias": 1})")),
            "f.json: $.layout.k_format.bias: unknown field; expected one of type, scale, group");
}

// Format version 5: MLX's affine groups. A name alone is group 64 (MLX's default), another
// group is written with it; a version 4 fixture with one, a group that is not MLX's, rows
// that are not whole groups, a group on another format and affine keys under RoPE are
// refused with one line each.
TEST(FixtureKvFormats, Version5HoldsTheAffineGroups) {
  const auto with = [](const std::string& fields, int version = 5) {
    return worked_example_with(fields, version, R"("head_dim": 1)", R"("head_dim": 64)");
  };
  const Scenario seed =
      load_fixture(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds/affine-pack-order.json");
  EXPECT_EQ(seed.layout.v_format, (KvFormat{KvQuant::affine4, {}, 32}));
  EXPECT_EQ(fixture_format_version(seed), 5);
  EXPECT_NE(write_fixture(seed).find(R"("v_format": {"type": "affine4", "group": 32})"),
            std::string::npos);
  Scenario s = seed;
  s.layout.value_dim = 64;
  s.tokens = GeneratedTokens{.seed = 1, .count = 2};
  s.expect.clear();
  s.layout.v_format.group = 64;
  const std::string written = write_fixture(s);
  EXPECT_NE(written.find(R"("v_format": "affine4")"), std::string::npos) << written;
  EXPECT_EQ(parse_fixture(written, "f.json"), s);

  EXPECT_EQ(error_of(with(R"("k_format": "affine8")", 4)),
            "f.json: $.layout.k_format: expected no affine8 in a version 4 fixture (the affine "
            "KV formats need \"kvfuzz_fixture\": 5), got \"affine8\"");
  EXPECT_EQ(error_of(with(R"("k_format": {"type": "affine8", "group": 16})")),
            "f.json: $.layout.k_format.group: expected 32, 64 or 128 (MLX's group sizes), got 16");
  EXPECT_EQ(error_of(with(R"("k_format": {"type": "affine2", "group": 128})")),
            "f.json: $.layout.k_format: expected a head_dim that is a multiple of the group (128) "
            "for affine2, got head_dim 64");
  EXPECT_EQ(error_of(with(R"("k_format": {"type": "q8_0", "group": 32})")),
            "f.json: $.layout.k_format.group: expected no \"group\" for q8_0 (only the affine "
            "and per-channel formats have one), got 32");
  // A block or affine format holds rotated keys (the reference models the rotation's
  // reach). (This fixture's tokens are of another head_dim: what fails is past the layout.)
  EXPECT_EQ(error_of(with(R"("k_format": "q4_1", "rope_theta": 10000)")).find("k_format"),
            std::string::npos);
  EXPECT_EQ(error_of(with(R"("k_format": "affine4", "rope_theta": 10000)")).find("k_format"),
            std::string::npos);
}

// Format version 4: MLA's value read from its key. Its explicit tokens carry no "v" (the
// value is the key's first value_dim elements), and each rule is one line.
TEST(FixtureValueFromKey, Version4HoldsItTokensWithoutValuesAndEveryRuleIsOneLine) {
  const Scenario seed =
      load_fixture(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds/mla-latent-value.json");
  EXPECT_TRUE(seed.layout.value_from_key);
  EXPECT_EQ(fixture_format_version(seed), 4);
  const auto& tokens = std::get<std::vector<ExplicitToken>>(seed.tokens);
  EXPECT_TRUE(tokens[0].v.empty());
  // The token table reads each value from its key: 2, 4, 8, not the RoPE part.
  const TokenTable table(seed.tokens, seed.layout);
  EXPECT_EQ(table.v(2)[0], 8.0f);
  const std::string written = write_fixture(seed);
  EXPECT_NE(written.find(R"("value_from_key": true)"), std::string::npos) << written;
  EXPECT_EQ(written.find(R"("v":)"), std::string::npos) << written;
  EXPECT_EQ(parse_fixture(written, "f.json"), seed);

  const auto error_with = [&](const std::string& from, const std::string& to) {
    return error_of(replace(written, from, to));
  };
  EXPECT_EQ(error_with(R"("kvfuzz_fixture": 4)", R"("kvfuzz_fixture": 3)"),
            "f.json: $.layout.value_from_key: expected no \"value_from_key\" in a version 3 "
            "fixture (a value read from its key needs \"kvfuzz_fixture\": 4), got true");
  EXPECT_EQ(error_with(R"("value_dim": 1)", R"("value_dim": 3)"),
            "f.json: $.layout.value_dim: expected at most head_dim (2) with value_from_key (the "
            "value is the key's first value_dim elements), got 3");
  EXPECT_EQ(error_with(R"("dtype": "f32")", R"("dtype": "f32", "rope_theta": 10000)"),
            "f.json: $.layout.rope_dims: expected rope_dims with value_from_key and rope_theta "
            "(MLA's RoPE turns only the key's last rope_dims elements; the value is the "
            "unrotated latent before them), got none");
  // A latent cache in ggml's blocks (llama.cpp's DeepSeek with -ctk q8_0) or affine groups:
  // the value must be whole blocks of the key row. (A head of 32 for a whole q8_0 block; the
  // tokens' shapes are checked after the layout.)
  const std::string q8_0_key =
      replace(replace(written, R"("head_dim": 2)", R"("head_dim": 32)"), R"("dtype": "f32")",
              R"("dtype": "f32", "k_format": "q8_0")");
  EXPECT_EQ(error_of(q8_0_key),
            "f.json: $.layout.value_dim: expected a multiple of 32 with value_from_key and "
            "k_format q8_0 (the value is whole blocks of the key's stored row), got 1");
  EXPECT_EQ(error_of(replace(q8_0_key, R"("value_dim": 1)", R"("value_dim": 32)")),
            "f.json: $.tokens.explicit[0].q[0]: expected 32 numbers (head_dim), got 2");
  const std::string affine_key = replace(
      replace(q8_0_key, R"("k_format": "q8_0")", R"("k_format": {"type": "affine4", "group": 32})"),
      R"("kvfuzz_fixture": 4)", R"("kvfuzz_fixture": 5)");
  EXPECT_EQ(error_of(affine_key),
            "f.json: $.layout.value_dim: expected a multiple of 32 with value_from_key and "
            "k_format affine4 (the value is whole blocks of the key's stored row), got 1");
  EXPECT_EQ(error_of(replace(affine_key, R"("value_dim": 1)", R"("value_dim": 32)")),
            "f.json: $.tokens.explicit[0].q[0]: expected 32 numbers (head_dim), got 2");
  EXPECT_EQ(error_with(R"("dtype": "f32")", R"("dtype": "f32", "v_format": "fp8_e4m3fn")"),
            "f.json: $.layout.v_format: expected none with value_from_key (the value is read "
            "from the key's cache, stored as k_format says), got fp8_e4m3fn");
  // An fp8 latent cache: valid; the value is the stored latent (token_table.cpp).
  EXPECT_NO_THROW(parse_fixture(
      replace(written, R"("dtype": "f32")", R"("dtype": "f32", "k_format": "fp8_e4m3fn")"),
      "f.json"));
  EXPECT_EQ(error_with(R"("k": [[2, 16]]})", R"("k": [[2, 16]], "v": [[2]]})"),
            "f.json: $.tokens.explicit[0].v: expected no \"v\" with value_from_key (the value "
            "is the key's first value_dim elements)");
  // Without value_from_key a token needs its v.
  EXPECT_EQ(error_with(R"("value_from_key": true)", R"("value_from_key": false)"),
            "f.json: $.tokens.explicit[0].v: expected 1 head (kv_heads), got 0");
  EXPECT_EQ(error_with(R"("value_from_key": true)", R"("value_from_key": 1)"),
            "f.json: $.layout.value_from_key: expected true or false, got 1");
}

// Format version 6: RoPE's interleaved pairs. The seed's rows are computed by hand (its
// note), so the reference's pairs are checked against arithmetic that is not its own.
TEST(FixtureRopeStyle, Version6HoldsInterleavedPairsAndEveryRuleIsOneLine) {
  const Scenario seed =
      load_fixture(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds/rope-interleaved-pairs.json");
  EXPECT_EQ(seed.layout.rope_style, RopeStyle::interleaved);
  EXPECT_EQ(fixture_format_version(seed), 6);
  const std::string written = write_fixture(seed);
  EXPECT_NE(written.find(R"("rope_style": "interleaved")"), std::string::npos) << written;
  EXPECT_EQ(parse_fixture(written, "f.json"), seed);
  // Half-split pairs are the default, written as nothing, in the lowest version as before.
  Scenario half = seed;
  half.layout.rope_style = RopeStyle::half_split;
  EXPECT_EQ(write_fixture(half).find(R"("rope_style":)"), std::string::npos);
  EXPECT_LT(fixture_format_version(half), 6);

  const auto error_with = [&](const std::string& from, const std::string& to) {
    return error_of(replace(written, from, to));
  };
  EXPECT_EQ(error_with(R"("kvfuzz_fixture": 6)", R"("kvfuzz_fixture": 5)"),
            "f.json: $.layout.rope_style: expected no \"rope_style\" in a version 5 fixture "
            "(RoPE's pairs need \"kvfuzz_fixture\": 6), got \"interleaved\"");
  EXPECT_EQ(error_with(R"("rope_style": "interleaved")", R"("rope_style": "gptj")"),
            "f.json: $.layout.rope_style: expected one of \"half_split\", \"interleaved\", got "
            "\"gptj\"");
  EXPECT_EQ(error_with(R"("rope_theta": 10000,)", ""),
            "f.json: $.layout.rope_style: expected no rope_style without rope_theta (it says "
            "which pairs RoPE turns), got \"interleaved\"");
}

// Format version 7: RoPE on part of the head (MLA's decoupled RoPE part). The seed's rows
// are computed by hand (its note).
TEST(FixtureRopeDims, Version7HoldsRopesPartAndEveryRuleIsOneLine) {
  const Scenario seed =
      load_fixture(fs::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds/mla-rope-part.json");
  EXPECT_EQ(seed.layout.rope_dims, 2);
  EXPECT_TRUE(seed.layout.value_from_key);
  EXPECT_EQ(fixture_format_version(seed), 7);
  const RopeShape shape = seed.layout.rope_shape();
  EXPECT_EQ(shape.offset(), 2u);
  EXPECT_EQ(shape.pair(0).first, 2u);
  EXPECT_EQ(shape.pair(0).second, 3u);
  const std::string written = write_fixture(seed);
  EXPECT_NE(written.find(R"("rope_dims": 2)"), std::string::npos) << written;
  EXPECT_EQ(parse_fixture(written, "f.json"), seed);

  const auto error_with = [&](const std::string& from, const std::string& to) {
    return error_of(replace(written, from, to));
  };
  EXPECT_EQ(error_with(R"("kvfuzz_fixture": 7)", R"("kvfuzz_fixture": 6)"),
            "f.json: $.layout.rope_dims: expected no \"rope_dims\" in a version 6 fixture "
            "(RoPE's part needs \"kvfuzz_fixture\": 7), got 2");
  EXPECT_EQ(error_with(R"("rope_dims": 2)", R"("rope_dims": 3)"),
            "f.json: $.layout.rope_dims: expected an even number from 2 to head_dim - 1 (3; "
            "RoPE over the whole head leaves rope_dims out), got 3");
  EXPECT_EQ(error_with(R"("rope_dims": 2)", R"("rope_dims": 4)"),
            "f.json: $.layout.rope_dims: expected an even number from 2 to head_dim - 1 (3; "
            "RoPE over the whole head leaves rope_dims out), got 4");
  EXPECT_EQ(error_with(R"("rope_dims": 2)", R"("rope_dims": 0)"),
            "f.json: $.layout.rope_dims: expected an integer in [2, 512], got 0");
  EXPECT_EQ(error_with(R"("rope_theta": 10000,)", ""),
            "f.json: $.layout.rope_dims: expected no rope_dims without rope_theta (it says which "
            "elements RoPE turns), got 2");
  // MLA's value is the unrotated latent: no wider than what RoPE leaves, and RoPE over the
  // whole head is refused with it.
  EXPECT_EQ(error_with(R"("value_dim": 2)", R"("value_dim": 3)"),
            "f.json: $.layout.value_dim: expected at most head_dim - rope_dims (2) with "
            "value_from_key and rope_theta (the value is the key's unrotated first elements; "
            "RoPE turns its last rope_dims), got 3");
  EXPECT_EQ(error_with("    \"rope_dims\": 2,\n", ""),
            "f.json: $.layout.rope_dims: expected rope_dims with value_from_key and rope_theta "
            "(MLA's RoPE turns only the key's last rope_dims elements; the value is the "
            "unrotated latent before them), got none");
}

TEST(FixtureErrors, GotValuesAreShortAndMessagesOneLine) {
  const std::string long_value(1000, 'x');
  const std::string message =
      error_of(replace(kWorkedExample, R"("dtype": "f32")", "\"dtype\": \"" + long_value + "\""));
  EXPECT_LT(message.size(), 150u) << message;
  EXPECT_TRUE(message.ends_with(", got \"" + std::string(36, 'x') + "...")) << message;
  // A key with a newline and a control character: the path escapes them.
  const std::string odd_key = error_of(
      replace(kWorkedExample, R"("sequences": 1,)", "\"sequences\": 1, \"a\\nb\\u0001\": 0,"));
  EXPECT_EQ(odd_key.find('\n'), std::string::npos);
  EXPECT_NE(odd_key.find(R"(f.json: $["a\nb\u0001"]: unknown field)"), std::string::npos)
      << odd_key;
  // An origin with a newline does not break the line either.
  try {
    parse_fixture("[]", "bad\nname.json");
    FAIL();
  } catch (const FixtureError& error) {
    EXPECT_EQ(std::string(error.what()),
              "bad\\nname.json: $: expected an object (a kvfuzz fixture), got []");
  }
  // Invalid UTF-8 is a JSON error with a position.
  EXPECT_EQ(error_of(replace(kWorkedExample, "worked-example", "worked\xFF")),
            "f.json: line 3, column 18: invalid JSON (syntax error while parsing value - invalid "
            "string: ill-formed UTF-8 byte; last read: '\"worked\xFF')");
}

TEST(FixtureErrors, NestingIsCheckedOutsideStringsOnly) {
  // 100 brackets inside a string (with escaped quotes) are not nesting.
  const std::string brackets = "\\\"" + std::string(100, '[') + "\\\\";
  EXPECT_EQ(error_of(replace(kWorkedExample, "worked-example", brackets)), "");
  // 64 levels are allowed (the parser then complains about the shape), 65 are not.
  const std::string deep64 = std::string(64, '[') + std::string(64, ']');
  EXPECT_EQ(error_of(deep64).find("f.json: $: expected an object"), 0u);
  const std::string deep65 = std::string(65, '[') + std::string(65, ']');
  EXPECT_EQ(error_of(deep65),
            "f.json: line 1, column 65: expected at most 64 levels of nested arrays and objects, "
            "got more");
  const std::string objects = std::string(1000, '{') + std::string(1000, '}');
  EXPECT_NE(error_of(objects).find("expected at most 64 levels"), std::string::npos);
}

TEST(FixtureErrors, OversizedInputIsRejectedBeforeParsing) {
  const std::string huge(static_cast<size_t>(limits::kMaxFixtureBytes) + 1, ' ');
  EXPECT_EQ(error_of(huge), "f.json: expected at most 67108864 bytes, got 67108865");
}

TEST(FixtureErrors, MalformedFixturesAreRejected) {
  const auto rows = read_manifest();
  ASSERT_GE(rows.size(), 35u);
  for (const ManifestRow& row : rows) {
    SCOPED_TRACE(row.file);
    const fs::path path = malformed_dir() / row.file;
    std::string message;
    try {
      load_fixture(path);
      ADD_FAILURE() << row.file << " was accepted";
      continue;
    } catch (const FixtureError& error) {
      message = error.what();
    }
    EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(": " + row.path + ": "), std::string::npos)
        << message << "\n  wanted path: " << row.path;
    EXPECT_NE(message.find(row.substring), std::string::npos)
        << message << "\n  wanted: " << row.substring;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find('\r'), std::string::npos) << message;
  }
}

TEST(FixtureErrors, ManifestAndDirectoryListTheSameFiles) {
  std::multiset<std::string> listed;
  for (const ManifestRow& row : read_manifest()) listed.insert(row.file);
  std::multiset<std::string> present;
  for (const auto& entry : fs::directory_iterator(malformed_dir())) {
    const std::string name = entry.path().filename().string();
    if (name != "EXPECTED.tsv") present.insert(name);
  }
  EXPECT_EQ(listed, present);
  for (const std::string& name : listed) EXPECT_EQ(listed.count(name), 1u) << name;
}

TEST(FixtureErrors, UnreadableFiles) {
  const fs::path dir = scratch_dir("unreadable");
  const fs::path missing = dir / "missing.json";
  try {
    load_fixture(missing);
    FAIL();
  } catch (const FixtureError& error) {
    EXPECT_EQ(std::string(error.what()),
              missing.string() + ": cannot read file (No such file or directory)");
  }
  try {
    load_fixture(dir);
    FAIL();
  } catch (const FixtureError& error) {
    EXPECT_EQ(std::string(error.what()), dir.string() + ": cannot read file (Is a directory)");
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// validate() on scenarios built in code (what generators do)

// The aggregate limits (pool elements, row values) cannot all be met with every per-field
// limit at its maximum at once, so each scenario sits exactly on some of them.
TEST(Validate, AcceptsTheLimitsThemselves) {
  const auto accepted = [](const Scenario& s) {
    const auto error = validate(s);
    EXPECT_FALSE(error) << error->path << ": " << error->message;
  };
  {
    // Every layout maximum but page_size; the derived pool is exactly kMaxPoolElements:
    // 255 pages of 1 token + 1 spare = 256 pages x 128 kv heads x 1024 elements = 2^25.
    Scenario s;
    s.name = std::string(static_cast<size_t>(limits::kMaxTextLength), 'n');
    s.layout.q_heads = limits::kMaxQHeads;
    s.layout.kv_heads = limits::kMaxKvHeads;
    s.layout.head_dim = limits::kMaxHeadDim;
    s.layout.value_dim = limits::kMaxValueDim;
    s.layout.page_size = 1;
    s.layout.window = limits::kMaxEpochTokens;
    s.layout.rope_theta = limits::kMaxRopeTheta;
    s.tokens = GeneratedTokens{0, 85, Distribution::wide, false};  // 85 x 3 x 128 x 512 floats
    s.sequences = limits::kMaxSequences;
    s.program = {Op::append(limits::kMaxSequences - 1, std::vector<int>(255, 84))};
    accepted(s);
  }
  {
    // The largest page and the largest pool_pages, each with the smallest elements.
    Scenario s;
    s.name = "pages";
    s.tokens = GeneratedTokens{0, 1, Distribution::dyadic, false};
    s.program = {Op::append(0, std::vector<int>(limits::kMaxChunkTokens, 0))};
    s.layout.page_size = limits::kMaxPageSize;
    s.placement.pool_pages = 4096;  // 4096 x 4096 x 1 x 2 = 2^25
    accepted(s);
    s.layout.page_size = 1;
    s.placement.pool_pages = limits::kMaxPoolPages;
    accepted(s);
  }
  {
    // Exactly kMaxRowValues: 256 tokens x 128 q heads x 512 values.
    Scenario s;
    s.name = "rows";
    s.layout.q_heads = limits::kMaxQHeads;
    s.layout.value_dim = limits::kMaxValueDim;
    s.tokens = GeneratedTokens{0, 1, Distribution::dyadic, false};
    s.program = {Op::append(0, std::vector<int>(128, 0)), Op::append(0, std::vector<int>(128, 0))};
    accepted(s);
  }
}

TEST(Validate, BoundsThePoolAndTheRows) {
  const auto check = [](const Scenario& s, const std::string& path, const std::string& message) {
    const auto error = validate(s);
    ASSERT_TRUE(error) << path;
    EXPECT_EQ(error->path, path);
    EXPECT_EQ(error->message, message);
  };
  const std::string pool =
      "a page pool of at most 33554432 K and V elements (pages x page_size x "
      "kv_heads x (head_dim + value_dim)), got ";
  Scenario s;
  s.name = "pool";
  s.layout.page_size = limits::kMaxPageSize;
  s.tokens = GeneratedTokens{0, 1, Distribution::dyadic, false};
  s.program = {Op::append(0, {0})};
  s.placement.pool_pages = 4097;
  check(s, "$.placement.pool_pages",
        pool + "33562624 (4097 pages (pool_pages) x 8192 elements each)");
  s.placement.pool_pages.reset();
  s.placement.order = PageOrder::explicit_list;
  s.placement.pages.resize(4097);
  for (size_t i = 0; i < s.placement.pages.size(); ++i) s.placement.pages[i] = static_cast<int>(i);
  check(s, "$.placement.page_order",
        pool + "33562624 (4097 pages (the length of page_order) x 8192 elements each)");
  s.placement = Placement{};
  // The derived pool: 2 pages of 4096 slots x 128 kv heads x 1024 elements.
  s.layout.q_heads = s.layout.kv_heads = limits::kMaxKvHeads;
  s.layout.head_dim = s.layout.value_dim = 512;
  check(s, "$.placement",
        pool + "1073741824 (2 pages (the program needs) x 536870912 elements each)");

  Scenario rows;
  rows.name = "rows";
  rows.layout.q_heads = limits::kMaxQHeads;
  rows.layout.value_dim = limits::kMaxValueDim;
  rows.tokens = GeneratedTokens{0, 1, Distribution::dyadic, false};
  rows.sequences = 2;
  rows.program = {Op::append(0, std::vector<int>(200, 0)),
                  Op::step({Chunk{1, {0}}, Chunk{0, std::vector<int>(56, 0)}})};
  check(rows, "$.program[1].chunks[1].tokens",
        "at most 16777216 row values in the whole program (tokens x q_heads x value_dim), got "
        "16842752 (257 tokens x 65536 values each) by the end of this chunk");
}

TEST(Validate, TokenValuesMustBeFiniteInTheDtype) {
  Scenario s;
  s.name = "values";
  s.tokens = std::vector<ExplicitToken>{ExplicitToken{{{0}}, {{0}}, {{0}}}};
  s.program = {Op::append(0, {0})};
  const auto error_for = [&](DType dtype, double x) {
    s.layout.dtype = dtype;
    std::get<std::vector<ExplicitToken>>(s.tokens)[0].q[0][0] = x;
    const auto error = validate(s);
    return error ? error->path + ": " + error->message : std::string();
  };
  EXPECT_EQ(error_for(DType::f16, 65504), "");
  EXPECT_EQ(error_for(DType::f16, -65519), "");  // rounds to -65504
  EXPECT_EQ(error_for(DType::f16, 65520),
            "$.tokens.explicit[0].q[0][0]: a value that is finite in f16 (|x| <= 65504), got "
            "65520");
  EXPECT_EQ(error_for(DType::f16, -70000),
            "$.tokens.explicit[0].q[0][0]: a value that is finite in f16 (|x| <= 65504), got "
            "-70000");
  EXPECT_EQ(error_for(DType::f16, 1e300),
            "$.tokens.explicit[0].q[0][0]: a value that is finite in f16 (|x| <= 65504), got "
            "1e+300");
  EXPECT_EQ(error_for(DType::bf16, 1e16), "");
  EXPECT_EQ(error_for(DType::f32, -1e16), "");
  EXPECT_EQ(error_for(DType::bf16, 2e16),
            "$.tokens.explicit[0].q[0][0]: a finite number with |x| <= 1e16, got 2e+16");
  EXPECT_EQ(error_for(DType::f32, 2e16),
            "$.tokens.explicit[0].q[0][0]: a finite number with |x| <= 1e16, got 2e+16");
}

TEST(Validate, RopeThetaIsBounded) {
  Scenario s;
  s.name = "rope";
  s.layout.head_dim = 2;
  s.tokens = GeneratedTokens{0, 1, Distribution::dyadic, false};
  s.program = {Op::append(0, {0})};
  for (double theta : {1.0000001, 10000.0, 1e7}) {
    s.layout.rope_theta = theta;
    EXPECT_FALSE(validate(s)) << theta;
  }
  for (double theta :
       {1.0, std::nextafter(1e7, 2e7), 1e8, std::numeric_limits<double>::infinity()}) {
    s.layout.rope_theta = theta;
    const auto error = validate(s);
    ASSERT_TRUE(error) << theta;
    EXPECT_EQ(error->path, "$.layout.rope_theta");
    EXPECT_EQ(error->message.rfind("a finite number in (1, 1e+07], got ", 0), 0u) << error->message;
  }
}

TEST(Validate, RejectsWhatTheParserCannotExpress) {
  const Scenario good = parse_fixture(kWorkedExample, "worked.json");
  const auto check = [](const Scenario& s, const std::string& path, const std::string& message) {
    const auto error = validate(s);
    ASSERT_TRUE(error) << path;
    EXPECT_EQ(error->path, path);
    EXPECT_EQ(error->message, message);
  };
  {
    Scenario s = good;
    s.program[0].chunks = {Chunk{0, {1}}};
    check(s, "$.program[0].chunks", "no chunks in an append op, got 1");
  }
  {
    Scenario s = good;
    s.program.push_back(Op::step({Chunk{0, {1}}}));
    s.program.back().tokens = {1};
    check(s, "$.program[2]",
          "a step op to carry its sequences and tokens in chunks only, got seq 0 and 1 token");
  }
  {
    Scenario s = good;
    s.program.push_back(Op::reset(0));
    s.program.back().tokens = {1, 2};
    check(s, "$.program[2]",
          "a reset op to carry no tokens and no chunks, got 2 tokens and 0 chunks");
  }
  {
    Scenario s = good;
    s.placement.pages = {0, 1};
    check(s, "$.placement.page_order",
          "no explicit page list unless page_order is a list, got 2 pages");
  }
  {
    Scenario s = good;
    s.name = "bad \xC3";
    check(s, "$.name", "valid UTF-8 text, got an invalid byte at offset 4");
  }
  {
    Scenario s = good;
    s.provenance.engine = "\xED\xA0\x80";  // an encoded surrogate
    check(s, "$.provenance.engine", "valid UTF-8 text, got an invalid byte at offset 0");
  }
  {
    Scenario s = good;
    s.expect[1].values[0][0] = std::numeric_limits<double>::quiet_NaN();
    check(s, "$.expect[1].values[0][0]", "a finite number, got nan");
  }
  {
    Scenario s = good;
    std::get<std::vector<ExplicitToken>>(s.tokens)[2].k[0][0] =
        -std::numeric_limits<double>::infinity();
    check(s, "$.tokens.explicit[2].k[0][0]", "a finite number with |x| <= 1e16, got -inf");
  }
  {
    Scenario s = good;
    s.layout.scale = std::numeric_limits<double>::infinity();
    check(s, "$.layout.scale", "a finite number > 0, got inf");
  }
  {
    Scenario s = good;
    s.layout.q_heads = 128;
    s.layout.kv_heads = 128;
    s.layout.head_dim = 512;
    s.layout.value_dim = 512;
    s.tokens = GeneratedTokens{0, 129, Distribution::wide, false};
    s.expect.clear();
    check(s, "$.tokens.generated.count",
          "at most 16777216 floats in the token table, got 25362432 (129 tokens x 196608 floats "
          "each)");
  }
  {
    Scenario s = good;
    s.program = {Op::append(0, std::vector<int>(limits::kMaxChunkTokens, 0)), Op::append(0, {1})};
    s.expect.clear();
    check(s, "$.program[1].tokens",
          "at most 16384 tokens in sequence 0 epoch 0, got 16385 by the end of this chunk");
    s.program.insert(s.program.begin() + 1, Op::reset(0));
    EXPECT_FALSE(validate(s));
  }
  {
    Scenario s = good;
    s.sequences = 16;
    s.expect.clear();
    s.program.clear();
    for (int seq = 0; seq < 16; ++seq) {
      s.program.push_back(Op::append(seq, std::vector<int>(limits::kMaxChunkTokens, 0)));
    }
    EXPECT_FALSE(validate(s));  // exactly kMaxProgramTokens
    s.program.push_back(Op::reset(3));
    s.program.push_back(Op::append(3, {4}));
    check(s, "$.program[17].tokens",
          "at most 262144 tokens in the whole program, got 262145 by the end of this chunk");
  }
  {
    Scenario s = good;
    s.program.push_back(Op::reset(0));
    s.expect.push_back(ExpectedRow{0, 1, 0, {{1}}});
    check(s, "$.expect[2].pos", "a position in [0, 0) (sequence 0 epoch 1 has 0 tokens), got 0");
  }
}

TEST(Validate, PoolPagesAreDerivedFromTheProgram) {
  Scenario s = every_feature();
  // Sequence 0's longest epoch has 5 tokens (3 pages of 2), sequence 1 has 2 (1 page), + 1.
  EXPECT_EQ(required_pool_pages(s), 5);
  s.placement.pages = {3, 0, 2, 1};
  s.placement.pool_pages.reset();
  const auto error = validate(s);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->path, "$.placement.page_order");
  EXPECT_EQ(error->message, "at least 5 pages (the program needs 5), got 4");
}

// ---------------------------------------------------------------------------------------
// Model level ("model": token ids are vocabulary ids, no token table)

const std::string kModelExample = R"({
  "kvfuzz_fixture": 1,
  "name": "model-example",
  "note": "two layers of GQA attention with RoPE; a fork shares a prefix",
  "layout": {
    "q_heads": 2,
    "kv_heads": 1,
    "head_dim": 4,
    "value_dim": 4,
    "page_size": 2,
    "dtype": "f32",
    "rope_theta": 10000
  },
  "model": {
    "vocab": 16,
    "width": 8,
    "layers": 2,
    "ffn": 16,
    "seed": 18446744073709551615
  },
  "sequences": 2,
  "program": [
    {"op": "append", "seq": 0, "tokens": [1, 5, 3]},
    {"op": "step", "chunks": [{"seq": 0, "tokens": [7]}, {"seq": 1, "tokens": [15, 0]}]},
    {"op": "fork", "src": 0, "dst": 1},
    {"op": "append", "seq": 1, "tokens": [2]}
  ],
  "placement": {
    "page_order": "identity",
    "poison": "nan"
  },
  "provenance": {
    "source": "hand"
  }
}
)";

Scenario model_scenario() {
  Scenario s;
  s.name = "model";
  s.model = ModelConfig{16, 8, 2, 16, 5};
  s.tokens = GeneratedTokens{0, 16, Distribution::small_int, false};
  s.program = {Op::append(0, {1, 2, 3})};
  return s;
}

TEST(FixtureModel, RoundTripsCanonically) {
  const Scenario s = parse_fixture(kModelExample, "model.json");
  ASSERT_TRUE(s.model);
  EXPECT_EQ(*s.model, (ModelConfig{16, 8, 2, 16, 18446744073709551615ull}));
  // The canonical token source of a model scenario: the table is unused.
  EXPECT_EQ(s.tokens, TokenSource(GeneratedTokens{0, 16, Distribution::small_int, false}));
  EXPECT_EQ(s.layout.q_heads, 2);
  EXPECT_EQ(s.program.size(), 4u);
  EXPECT_EQ(write_fixture(s), kModelExample);
  EXPECT_EQ(parse_fixture(write_fixture(s), "again.json"), s);
  // Built in code, the same scenario writes the same text.
  Scenario built = s;
  built.model = ModelConfig{16, 8, 2, 16, 18446744073709551615ull};
  EXPECT_EQ(write_fixture(built), kModelExample);
  // No "tokens" key is written for a model scenario, and none for the model otherwise.
  EXPECT_EQ(kModelExample.find("\"tokens\": {"), std::string::npos);
  EXPECT_EQ(kEveryFeature.find("\"model\""), std::string::npos);
}

TEST(FixtureModel, AcceptsAnyKeyOrderAndTheLimits) {
  const std::string reordered =
      replace(kModelExample, R"("vocab": 16,
    "width": 8,
    "layers": 2,
    "ffn": 16,
    "seed": 18446744073709551615)",
              R"("seed": 0, "ffn": 4096, "layers": 16, "width": 1, "vocab": 4096)");
  const Scenario s = parse_fixture(reordered, "r.json");
  ASSERT_TRUE(s.model);
  EXPECT_EQ(*s.model, (ModelConfig{4096, 1, 16, 4096, 0}));
  EXPECT_EQ(std::get<GeneratedTokens>(s.tokens).count, 4096);
  EXPECT_EQ(parse_fixture(write_fixture(s), "r2.json"), s);
}

TEST(FixtureModel, ExactMessages) {
  const std::string tokens = R"(  "tokens": {
    "generated": {"seed": 0, "count": 16, "distribution": "small-int"}
  },
)";
  EXPECT_EQ(
      error_of(replace(kModelExample, "  \"sequences\": 2,\n", tokens + "  \"sequences\": 2,\n")),
      "f.json: $.tokens: expected no \"tokens\" in a model scenario (its token ids are "
      "vocabulary ids in [0, model.vocab)), got {\"generated\":{\"count\":16,\"distributio...");
  EXPECT_EQ(error_of(replace(kModelExample, "[1, 5, 3]", "[1, 16, 3]")),
            "f.json: $.program[0].tokens[1]: expected a vocabulary id in [0, 16) (the model's "
            "vocab is 16), got 16");
  EXPECT_EQ(error_of(replace(kModelExample, "\"layers\": 2,\n    ", "")),
            "f.json: $.model.layers: missing; expected an integer in [1, 16]");
  EXPECT_EQ(error_of(replace(kModelExample, "\"width\": 8", "\"width\": 1025")),
            "f.json: $.model.width: expected an integer in [1, 1024], got 1025");
  EXPECT_EQ(error_of(replace(kModelExample, "\"vocab\": 16", "\"vocab\": 0")),
            "f.json: $.model.vocab: expected an integer in [1, 4096], got 0");
  EXPECT_EQ(error_of(replace(kModelExample, "\"ffn\": 16", "\"ffn\": 16.0")),
            "f.json: $.model.ffn: expected an integer in [1, 4096], got 16.0 (integers are "
            "written without a fraction or exponent)");
  EXPECT_EQ(error_of(replace(kModelExample, "\"seed\": 18446744073709551615", "\"seed\": -1")),
            "f.json: $.model.seed: expected an unsigned 64-bit integer in [0, "
            "18446744073709551615], got -1");
  EXPECT_EQ(error_of(replace(kModelExample, "\"ffn\": 16", "\"hidden\": 16")),
            "f.json: $.model.hidden: unknown field; expected one of vocab, width, layers, ffn, "
            "seed");
  EXPECT_EQ(error_of(replace(kModelExample, "  \"placement\"",
                             "  \"expect\": [{\"seq\": 0, \"epoch\": 0, \"pos\": 0, \"values\": "
                             "[[1, 2, 3, 4], [1, 2, 3, 4]]}],\n  \"placement\"")),
            "f.json: $.expect: expected no expect rows in a model scenario (logits are checked "
            "against the reference transformer), got 1 row");
  // Without a model, tokens stay required.
  EXPECT_EQ(error_of(replace(kModelExample, R"(  "model": {
    "vocab": 16,
    "width": 8,
    "layers": 2,
    "ffn": 16,
    "seed": 18446744073709551615
  },
)",
                             "")),
            "f.json: $.tokens: missing; expected an object with either \"explicit\" or "
            "\"generated\" token data");
}

TEST(FixtureModel, ValidateKeepsTheTokenSourceCanonical) {
  const auto check = [](const Scenario& s, const std::string& path, const std::string& message) {
    const auto error = validate(s);
    ASSERT_TRUE(error) << path;
    EXPECT_EQ(error->path, path);
    EXPECT_EQ(error->message, message);
  };
  EXPECT_FALSE(validate(model_scenario()));
  const std::string prefix =
      "no token table in a model scenario (token ids are vocabulary ids; the scenario holds "
      "generated tokens {seed 0, count 16 (model.vocab), small-int}), got ";
  {
    Scenario s = model_scenario();
    s.tokens = GeneratedTokens{0, 17, Distribution::small_int, false};
    check(s, "$.tokens", prefix + "generated tokens {seed 0, count 17, small-int}");
    s.tokens = GeneratedTokens{3, 16, Distribution::dyadic, true};
    check(s, "$.tokens", prefix + "generated tokens {seed 3, count 16, dyadic, zero_scores}");
    s.tokens = std::vector<ExplicitToken>(16, ExplicitToken{{{0}}, {{0}}, {{1}}});
    check(s, "$.tokens", prefix + "explicit tokens");
  }
  {
    Scenario s = model_scenario();
    s.program = {Op::append(0, {1, -1})};
    check(s, "$.program[0].tokens[1]",
          "a vocabulary id in [0, 16) (the model's vocab is 16), got -1");
    s.program = {Op::step({Chunk{0, {16}}})};
    check(s, "$.program[0].chunks[0].tokens[0]",
          "a vocabulary id in [0, 16) (the model's vocab is 16), got 16");
  }
  {
    Scenario s = model_scenario();
    s.model->layers = 0;
    check(s, "$.model.layers", "an integer in [1, 16], got 0");
    s = model_scenario();
    s.model->width = 0;
    check(s, "$.model.width", "an integer in [1, 1024], got 0");
    s = model_scenario();
    s.model->ffn = 4097;
    check(s, "$.model.ffn", "an integer in [1, 4096], got 4097");
    s = model_scenario();
    s.model->vocab = 4097;
    check(s, "$.model.vocab", "an integer in [1, 4096], got 4097");
  }
  {
    Scenario s = model_scenario();
    s.expect = {ExpectedRow{0, 0, 0, {{1}}}};
    check(s, "$.expect",
          "no expect rows in a model scenario (logits are checked against the reference "
          "transformer), got 1 row");
  }
}

// llama.cpp's --cache-type-k and -v and mlx-lm's QuantizedKVCache at model level: ggml's
// blocks and the affine groups, no fp8, at the model's own softmax scale (within 8 /
// sqrt(head_dim)).
TEST(FixtureModel, ValidateTakesBlockAndAffineCachesAtTheModelsOwnScale) {
  const auto check = [](const Scenario& s, const std::string& path, const std::string& message) {
    const auto error = validate(s);
    ASSERT_TRUE(error) << path;
    EXPECT_EQ(error->path, path);
    EXPECT_EQ(error->message, message);
  };
  Scenario s = model_scenario();
  s.layout.head_dim = s.layout.value_dim = 32;
  s.layout.k_format = KvFormat{KvQuant::q8_0, {}};
  s.layout.v_format = KvFormat{KvQuant::q4_1, {}};
  EXPECT_FALSE(validate(s));
  s.layout.scale = 8 / std::sqrt(32.0);  // the largest
  EXPECT_FALSE(validate(s));
  s.layout.scale = 1.5;
  check(s, "$.layout.scale",
        "at most 1.414213562373095 (8 / sqrt(head_dim)) in a model scenario with a quantized "
        "KV cache (softmax then weighs keys smoothly: model_tolerance.cpp), got 1.5");
  s.layout.scale.reset();
  s.layout.k_format = KvFormat{KvQuant::fp8_e4m3fn, {0.5}};
  check(s, "$.layout.k_format",
        "none, one of ggml's block formats (q8_0, q4_0, q4_1, q5_0, q5_1) or an affine one "
        "(affine2, affine4, affine8) in a model scenario (the model level models no fp8 KV "
        "cache yet), got fp8_e4m3fn");
  s.layout.k_format = KvFormat{KvQuant::affine4, {}, 32};
  s.layout.v_format = KvFormat{KvQuant::affine4, {}, 32};
  EXPECT_FALSE(validate(s));
  s.layout.v_format = KvFormat{KvQuant::fp8_e5m2, {1}};
  check(s, "$.layout.v_format",
        "none, one of ggml's block formats (q8_0, q4_0, q4_1, q5_0, q5_1) or an affine one "
        "(affine2, affine4, affine8) in a model scenario (the model level models no fp8 KV "
        "cache yet), got fp8_e5m2");
  // Without a model, the same scale is an attention scenario's own business.
  s.layout.v_format = KvFormat{KvQuant::q8_0, {}};
  s.layout.scale = 1024;
  EXPECT_TRUE(validate(s));
  Scenario attention = s;
  attention.model.reset();
  attention.tokens = GeneratedTokens{0, 16, Distribution::small_int, false};
  EXPECT_FALSE(validate(attention));
}

TEST(FixtureModel, ValidateBoundsTheModel) {
  const auto check = [](const Scenario& s, const std::string& path, const std::string& message) {
    const auto error = validate(s);
    ASSERT_TRUE(error) << path;
    EXPECT_EQ(error->path, path);
    EXPECT_EQ(error->message, message);
  };
  const auto accepted = [](const Scenario& s) {
    const auto error = validate(s);
    EXPECT_FALSE(error) << error->path << ": " << error->message;
  };
  const auto with = [](ModelConfig m, int tokens) {
    Scenario s;
    s.name = "limits";
    s.model = m;
    s.tokens = GeneratedTokens{0, m.vocab, Distribution::small_int, false};
    s.program = {Op::append(0, std::vector<int>(static_cast<size_t>(tokens), 0))};
    return s;
  };
  // Weights: 2 x 4096 x 1024 (embedding, LM head) + 1024 (final norm) + one layer of
  // 1024 x 3 (q, k, v) + 1024 (output) + 3 x 1024 x 4096 (MLP) + 2 x 1024 (norms).
  check(with(ModelConfig{4096, 1024, 1, 4096, 0}, 1), "$.model",
        "a model of at most 16777216 weights (embedding, layers and LM head, with the layout's "
        "attention shapes), got 20978688");
  // One layer of 4096 x 1024 MLP weights and little else: 12588032 multiply-adds per token.
  Scenario s = with(ModelConfig{1, 1024, 1, 4096, 0}, 341);
  accepted(s);
  s = with(ModelConfig{1, 1024, 1, 4096, 0}, 342);
  check(s, "$.program[0].tokens",
        "at most 4294967296 model multiply-adds in the whole program, got 4305106944 (342 "
        "tokens x 12588032 each) by the end of this chunk");
  // Rows: 16 layers x (128 q heads x 512 values + width 1) + vocab 1 = 1048593 per token.
  s = with(ModelConfig{1, 1, 16, 1, 0}, 15);
  s.layout.q_heads = 128;
  s.layout.kv_heads = 128;
  s.layout.value_dim = 512;
  accepted(s);
  s.program = {Op::append(0, std::vector<int>(16, 0))};
  check(s, "$.program[0].tokens",
        "at most 16777216 model row values in the whole program (tokens x (layers x (q_heads x "
        "value_dim + width) + vocab)), got 16777488 (16 tokens x 1048593 values each) by the end "
        "of this chunk");
}

// ---------------------------------------------------------------------------------------
// Saving

TEST(SaveFixture, WritesAtomicallyAndCreatesDirectories) {
  const fs::path dir = scratch_dir("save");
  const fs::path path = dir / "nested" / "deeper" / "every.json";
  const Scenario s = every_feature();
  save_fixture(s, path);
  EXPECT_EQ(load_fixture(path), s);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, kEveryFeature);
  // Overwriting replaces the file; no temporary file is left behind.
  Scenario other = s;
  other.name = "replaced";
  save_fixture(other, path);
  EXPECT_EQ(load_fixture(path).name, "replaced");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path.parent_path())) {
    files.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(files, std::vector<std::string>{"every.json"});
  fs::remove_all(dir);
}

TEST(SaveFixture, ReportsUnwritablePaths) {
  const fs::path dir = scratch_dir("unwritable");
  const fs::path file = dir / "plain";
  std::ofstream(file) << "x";
  try {
    save_fixture(every_feature(), file / "under-a-file.json");
    FAIL();
  } catch (const FixtureError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind((file / "under-a-file.json").string() + ": cannot write file (", 0), 0u)
        << message;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvfuzz
