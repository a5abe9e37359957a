// The one JSON reader (support/json_path.h): every error is one line naming the JSON path
// of the value and what was expected, under the document's own report; strictness
// (unknown fields, missing fields) is the caller's choice per value.
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "support/json_path.h"

namespace kvfuzz {
namespace {

// Errors as "doc: PATH: MESSAGE".
class TestReport final : public JsonReport {
 public:
  explicit TestReport(Keys keys = Keys::json_path) : JsonReport(keys) {}
  std::exception_ptr error(const std::string& path, std::string_view message) const override {
    return std::make_exception_ptr(
        std::runtime_error("doc: " + path + ": " + std::string(message)));
  }
};

// The message `read` throws, or "" (a test failure) when it throws nothing.
std::string error_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  ADD_FAILURE() << "the read succeeded";
  return "";
}

class JsonPathTest : public ::testing::Test {
 protected:
  JsonNode root(const std::string& text, std::string path = "$") {
    document_ = Json::parse(text);
    return JsonNode(&document_, std::move(path), report_);
  }

  TestReport report_;
  Json document_;
};

TEST_F(JsonPathTest, ValuesAreRead) {
  const JsonNode doc =
      root(R"({"n": 7, "s": "x", "b": true, "f": 0.5, "a": [1, 2], "u": 18446744073709551615})");
  EXPECT_EQ(doc.field("n").to_int(0, 9), 7);
  EXPECT_EQ(doc.field("s").to_string(), "x");
  EXPECT_TRUE(doc.field("b").to_bool());
  EXPECT_EQ(doc.field("f").to_number(), 0.5);
  EXPECT_EQ(doc.field("a").array_size(), 2u);
  EXPECT_EQ(doc.field("a").at(1).to_int64(0, 5), 2);
  EXPECT_EQ(doc.field("u").to_uint64(), std::numeric_limits<uint64_t>::max());
}

TEST_F(JsonPathTest, ErrorsNameThePathAndWhatWasExpected) {
  const JsonNode doc = root(R"({"a": [{"b": 7}, {"b": "7"}], "odd key": 3.0})");
  EXPECT_EQ(error_of([&] { doc.field("a").at(0).field("b").to_int(0, 5); }),
            "doc: $.a[0].b: expected an integer in [0, 5], got 7");
  EXPECT_EQ(error_of([&] { doc.field("a").at(1).field("b").to_int(0, 9); }),
            "doc: $.a[1].b: expected an integer in [0, 9], got \"7\"");
  EXPECT_EQ(error_of([&] { doc.field("odd key").to_int64(0, 5); }),
            "doc: $[\"odd key\"]: expected an integer in [0, 5], got 3.0");
  EXPECT_EQ(error_of([&] { doc.field("a").to_bool(); }),
            "doc: $.a: expected true or false, got [{\"b\":7},{\"b\":\"7\"}]");
  EXPECT_EQ(error_of([&] { doc.field("a").at(0).to_string(); }),
            "doc: $.a[0]: expected a string, got {\"b\":7}");
  EXPECT_EQ(error_of([&] { doc.field("a").field("x"); }),
            "doc: $.a: expected an object, got [{\"b\":7},{\"b\":\"7\"}]");
}

TEST_F(JsonPathTest, IntegersAreExact) {
  const JsonNode doc = root(R"({"max": 18446744073709551615, "neg": -1, "float": 2.0, "b": true})");
  // nlohmann reads 2^64 - 1 as unsigned: too large, not -1.
  EXPECT_EQ(error_of([&] { doc.field("max").to_int64(-5, 5); }),
            "doc: $.max: expected an integer in [-5, 5], got 18446744073709551615");
  EXPECT_EQ(doc.field("neg").to_int64(-5, 5), -1);
  EXPECT_FALSE(doc.field("float").is_integer_in(0, 5));
  EXPECT_FALSE(doc.field("b").is_integer_in(0, 5));
  EXPECT_EQ(error_of([&] { doc.field("neg").to_uint64(); }),
            "doc: $.neg: expected an unsigned 64-bit integer in [0, 18446744073709551615], got -1");
  EXPECT_EQ(error_of([&] { doc.field("float").to_int(0, 5, "a count"); }),
            "doc: $.float: expected a count, got 2.0");
}

TEST_F(JsonPathTest, MissingFieldsAreReportedEitherWay) {
  const JsonNode doc = root(R"({"a": 1})");
  // field(): the conversion says what was wanted and that nothing was there.
  EXPECT_FALSE(doc.field("b").present());
  EXPECT_EQ(error_of([&] { doc.field("b").to_string(); }),
            "doc: $.b: expected a string, got nothing (the field is missing)");
  // JsonObject::need(): "missing".
  const JsonObject object = doc.to_object({"a", "b"});
  EXPECT_TRUE(object.has("a"));
  EXPECT_FALSE(object.get("b").has_value());
  EXPECT_EQ(error_of([&] { object.need("b", "a name"); }), "doc: $.b: missing; expected a name");
  EXPECT_EQ(object.get_int("a", 0, 3), 1);
}

TEST_F(JsonPathTest, UnknownFieldsAreRefusedOnlyWhenAsked) {
  const JsonNode doc = root(R"({"a": 1, "zz": 2})");
  EXPECT_EQ(doc.field("a").to_int(0, 1), 1);  // field() looks at nothing else
  EXPECT_EQ(error_of([&] {
              doc.to_object({"a", "b"}, " (for a test)");
            }),
            "doc: $.zz: unknown field; expected one of a, b (for a test)");
}

TEST_F(JsonPathTest, ShapesAndLimits) {
  const JsonNode doc = root(R"({"a": [1, 2, 3], "s": "hello", "c": "blue"})");
  EXPECT_EQ(error_of([&] { doc.field("a").array_size(2, "token ids"); }),
            "doc: $.a: expected at most 2 token ids, got 3");
  EXPECT_EQ(error_of([&] { doc.field("s").array_size(2, "token ids"); }),
            "doc: $.s: expected an array of token ids, got \"hello\"");
  EXPECT_EQ(error_of([&] { doc.field("a").expect_array_of(2, "rows"); }),
            "doc: $.a: expected an array of 2 rows, got [1,2,3]");
  EXPECT_EQ(error_of([&] { doc.field("s").to_string(3); }),
            "doc: $.s: expected a string of at most 3 bytes, got 5 bytes");
  EXPECT_EQ(error_of([&] {
              doc.field("c").to_choice({"red", "green"});
            }),
            "doc: $.c: expected one of \"red\", \"green\", got \"blue\"");
  EXPECT_EQ(doc.field("c").to_choice({"red", "blue"}), "blue");
}

TEST_F(JsonPathTest, LongValuesAreCutInMessages) {
  const JsonNode doc =
      root(R"({"a": [1111111111, 2222222222, 3333333333, 4444444444, 5555555555]})");
  EXPECT_EQ(error_of([&] { doc.field("a").to_bool(); }),
            "doc: $.a: expected true or false, got [1111111111,2222222222,3333333333,444...");
  EXPECT_EQ(describe_json(Json(
                "\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac")),
            "\"\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac...");
}

TEST(JsonPathKeys, DottedPathsStartWithoutARoot) {
  const TestReport dotted(JsonReport::Keys::dotted);
  const Json document = Json::parse(R"({"hits": {"window-slide": "x"}, "list": [true]})");
  const JsonNode root(&document, "", dotted);
  EXPECT_EQ(root.field("hits").field("window-slide").path(), "hits.window-slide");
  EXPECT_EQ(root.field("list").at(0).path(), "list[0]");
  EXPECT_EQ(error_of([&] { root.field("hits").field("window-slide").to_int(0, 1, "a count"); }),
            "doc: hits.window-slide: expected a count, got \"x\"");
  const TestReport json_path;
  EXPECT_EQ(json_path.key_path("$", "window-slide"), "$[\"window-slide\"]");
  EXPECT_EQ(path_key("$.a", "b_2"), "$.a.b_2");
  EXPECT_EQ(path_key("$", "2b"), "$[\"2b\"]");
}

TEST(JsonPathWords, RangesAndChoices) {
  EXPECT_EQ(int_range_text(1, 64), "an integer in [1, 64]");
  EXPECT_EQ(int_range_text(std::numeric_limits<int>::min(), std::numeric_limits<int>::max()),
            "an integer");
  EXPECT_EQ(int_range_text(0, std::numeric_limits<int64_t>::max()), "a non-negative integer");
  EXPECT_EQ(choices_text({"a", "b"}, false), "one of a, b");
  EXPECT_EQ(choices_text({"a", "b"}, true), "one of \"a\", \"b\"");
}

}  // namespace
}  // namespace kvfuzz
