// Reading a parsed JSON document value by value, each value with its JSON path, so that
// the first value of the wrong type, shape or range becomes one line naming where it is
// and what was expected: "PATH: expected an integer in [1, 64], got "3"".
//
// kvfuzz reads three kinds of documents this way: fixtures (corpus/json_reader.h),
// campaign records (campaign/campaign_record.cpp) and engine replies
// (doors/exec_protocol.cpp). The reading is the same for all three; what differs is a
// policy of the document, a JsonReport: which exception an error is, what comes before
// the path, how a bad value is shown, how keys are written into paths. How strict a read
// is stays the caller's explicit choice at each value: JsonNode::to_object() refuses
// unknown fields and JsonObject::need() says "missing", while JsonNode::field() accepts
// any other fields and leaves a missing one for the conversion to report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvfuzz {

using Json = nlohmann::json;

// How one kind of document reports a bad value.
class JsonReport {
 public:
  // How a key is added to its parent's path.
  enum class Keys {
    // `$.a.b`, keys that are not identifiers as `$["a b"]` (a JSON path).
    json_path,
    // `a.b`, every key as it is, and no leading dot under the root path "".
    dotted,
  };

  explicit JsonReport(Keys keys = Keys::json_path) : keys_(keys) {}
  virtual ~JsonReport() = default;

  // This document's error about the value at `path`; `message` is what is wrong with it
  // ("expected ..., got ...", "missing; expected ...").
  virtual std::exception_ptr error(const std::string& path, std::string_view message) const = 0;
  // Throws error(path, message).
  [[noreturn]] void fail(const std::string& path, std::string_view message) const {
    std::rethrow_exception(error(path, message));
  }

  // What a value is, for "expected WHAT, got ..."; nullptr when the field is missing.
  // By default describe_json(), or "nothing (the field is missing)".
  virtual std::string got(const Json* value, std::string_view expected) const;

  // `parent` and `key` as Keys says.
  std::string key_path(std::string_view parent, std::string_view key) const;

 private:
  Keys keys_;
};

// A short rendering of a JSON value: its compact dump, cut after about 40 bytes.
std::string describe_json(const Json& value);

// JSON paths: `$.a.b[3]`; keys that are not plain identifiers are written `["..."]`.
std::string path_key(std::string_view parent, std::string_view key);
std::string path_index(std::string_view parent, size_t index);

// "an integer in [lo, hi]"; "an integer" when [lo, hi] covers the whole int range;
// "a non-negative integer" for [0, INT64_MAX].
std::string int_range_text(int64_t lo, int64_t hi);

// "one of "a", "b", "c"" (quoted) or "one of a, b, c" (plain).
std::string choices_text(std::initializer_list<std::string_view> choices, bool quoted);
std::string choices_text(std::span<const std::string_view> choices, bool quoted);

class JsonObject;

// One value of a document with its path, or a field that is missing (from field()).
// Every conversion checks the JSON type first, so nlohmann never throws from here; each
// throws the report's error naming the path and what was expected.
class JsonNode {
 public:
  // `value` may be null: a missing field. `report` must outlive the node.
  JsonNode(const Json* value, std::string path, const JsonReport& report)
      : value_(value), path_(std::move(path)), report_(&report) {}

  bool present() const { return value_ != nullptr; }
  // Only when present().
  const Json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  const JsonReport& report() const { return *report_; }

  // Throws "PATH: MESSAGE" (as the report writes it).
  [[noreturn]] void fail(std::string_view message) const;
  // Throws "PATH: expected WHAT, got <this value>".
  [[noreturn]] void expected(std::string_view what) const;

  // Whether this is an integer in [lo, hi]: booleans, floats (even 3.0) and strings are
  // not. nlohmann reads every non-negative integer as unsigned; those are compared as
  // unsigned, so 2^64 - 1 is too large rather than -1.
  bool is_integer_in(int64_t lo, int64_t hi) const;
  // An integer in [lo, hi], else expected(what); `what` is int_range_text(lo, hi) unless
  // given.
  int64_t to_int64(int64_t lo, int64_t hi) const;
  int64_t to_int64(int64_t lo, int64_t hi, std::string_view what) const;
  int to_int(int lo, int hi) const;
  int to_int(int lo, int hi, std::string_view what) const;
  // An integer in [0, 2^64).
  uint64_t to_uint64() const;
  // Any JSON number, as a double.
  double to_number() const;
  bool to_bool() const;
  // A string of at most `max_bytes` bytes.
  std::string to_string(size_t max_bytes = std::string::npos) const;
  // One of the given strings.
  std::string to_choice(std::initializer_list<std::string_view> choices) const;
  std::string to_choice(std::span<const std::string_view> choices) const;

  // An array ("an array"); returns its size.
  size_t array_size() const;
  // An array of at most `max_size` elements (`what` names them in messages, e.g.
  // "token ids"); returns its size.
  size_t array_size(size_t max_size, std::string_view what) const;
  // An array of exactly `size` elements: "an array of SIZE ELEMENTS".
  void expect_array_of(size_t size, std::string_view elements) const;
  // An element of an array checked by one of the above.
  JsonNode at(size_t index) const;

  // The field `key` of this object (else "an object"), missing or not; other fields are
  // not looked at.
  JsonNode field(std::string_view key) const;
  // An object whose keys are all in `fields` (else "unknown field; expected one of ...";
  // `context` is appended to that list, e.g. " (for a reset op)").
  JsonObject to_object(std::initializer_list<std::string_view> fields,
                       std::string_view context = {}) const;
  JsonObject to_object(std::span<const std::string_view> fields,
                       std::string_view context = {}) const;

 private:
  const Json* value_;
  std::string path_;
  const JsonReport* report_;
};

// An object whose keys have been checked against the allowed fields.
class JsonObject {
 public:
  // `node` holds an object.
  explicit JsonObject(JsonNode node) : node_(std::move(node)) {}

  const JsonNode& node() const { return node_; }
  bool has(std::string_view key) const;
  std::optional<JsonNode> get(std::string_view key) const;
  // The field, or "PATH.key: missing; expected WHAT".
  JsonNode need(std::string_view key, std::string_view what) const;

  int need_int(std::string_view key, int lo, int hi) const;
  std::optional<int> get_int(std::string_view key, int lo, int hi) const;
  std::string need_string(std::string_view key, size_t max_bytes) const;
  std::optional<std::string> get_string(std::string_view key, size_t max_bytes) const;
  std::string need_choice(std::string_view key,
                          std::initializer_list<std::string_view> choices) const;

 private:
  JsonNode node_;
};

}  // namespace kvfuzz
