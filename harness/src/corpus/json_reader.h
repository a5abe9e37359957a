// A small path-tracking JSON reader, private to the fixture library.
//
// parse_document() turns text into a DOM after guarding against hostile input (size,
// nesting depth, duplicate keys); Node and Object then read that DOM field by field and
// throw FixtureError as one line, "ORIGIN: $.json.path: expected ..., got ...", at the
// first value that has the wrong type, shape or range, or an unknown or missing field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvfuzz::json_reader {

using Json = nlohmann::json;

// Parses `text` into a DOM. Throws FixtureError ("ORIGIN: line L, column C: ...") for
// input over limits::kMaxFixtureBytes, nesting deeper than limits::kMaxJsonDepth
// (checked before the parser runs), invalid JSON and duplicate object keys.
Json parse_document(std::string_view text, std::string_view origin);

// The error line "ORIGIN: WHERE: MESSAGE", with every control character escaped so the
// line never breaks.
std::string error_line(std::string_view origin, std::string_view where, std::string_view message);

// A short rendering of a JSON value for "got ..." (compact dump, truncated to ~40 bytes).
std::string describe(const Json& value);

// JSON paths: `$.a.b[3]`; keys that are not plain identifiers are written `["..."]`.
std::string path_key(std::string_view parent, std::string_view key);
std::string path_index(std::string_view parent, size_t index);

// "an integer in [lo, hi]"; "an integer" when [lo, hi] covers the whole int range (the
// value is then checked by validate(), which knows the real bounds).
std::string int_range_text(int64_t lo, int64_t hi);

// "one of "a", "b", "c"" (quoted) or "one of a, b, c" (plain).
std::string choices_text(std::initializer_list<std::string_view> choices, bool quoted);

class Object;

// One value of the document with its JSON path.
class Node {
 public:
  Node(const Json& value, std::string path, std::string_view origin)
      : value_(&value), path_(std::move(path)), origin_(origin) {}

  const Json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  std::string_view origin() const { return origin_; }

  // Throws "ORIGIN: PATH: MESSAGE".
  [[noreturn]] void fail(std::string_view message) const;
  // Throws "ORIGIN: PATH: expected WHAT, got <this value>".
  [[noreturn]] void expected(std::string_view what) const;

  // An integer in [lo, hi]: booleans, floats (even 3.0) and strings are rejected.
  int64_t to_int64(int64_t lo, int64_t hi) const;
  int to_int(int lo, int hi) const;
  // An integer in [0, 2^64).
  uint64_t to_uint64() const;
  // Any JSON number, as a double.
  double to_number() const;
  bool to_bool() const;
  // A string of at most `max_bytes` bytes.
  std::string to_string(size_t max_bytes) const;
  // One of the given strings.
  std::string to_choice(std::initializer_list<std::string_view> choices) const;

  // An array of at most `max_size` elements (`what` names them in messages, e.g.
  // "token ids"); returns its size. Elements are then read one by one with at().
  size_t array_size(size_t max_size, std::string_view what) const;
  Node at(size_t index) const;
  // An object whose keys are all in `fields` (else "unknown field; expected one of ...";
  // `context` is appended to that list, e.g. " (for a reset op)").
  Object to_object(std::initializer_list<std::string_view> fields,
                   std::string_view context = {}) const;

 private:
  const Json* value_;
  std::string path_;
  std::string_view origin_;
};

// An object whose keys have been checked against the allowed fields.
class Object {
 public:
  explicit Object(Node node) : node_(std::move(node)) {}

  const Node& node() const { return node_; }
  bool has(std::string_view key) const;
  std::optional<Node> get(std::string_view key) const;
  // The field, or "ORIGIN: PATH.key: missing; expected WHAT".
  Node need(std::string_view key, std::string_view what) const;

  int need_int(std::string_view key, int lo, int hi) const;
  std::optional<int> get_int(std::string_view key, int lo, int hi) const;
  std::string need_string(std::string_view key, size_t max_bytes) const;
  std::optional<std::string> get_string(std::string_view key, size_t max_bytes) const;
  std::string need_choice(std::string_view key,
                          std::initializer_list<std::string_view> choices) const;

 private:
  Node node_;
};

}  // namespace kvfuzz::json_reader
