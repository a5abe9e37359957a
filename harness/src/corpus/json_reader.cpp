#include "corpus/json_reader.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "kvfuzz/fixture_io.h"
#include "scenario/limits.h"

namespace kvfuzz::json_reader {

namespace {

constexpr size_t kDescribeBytes = 40;

// Cuts `text` to at most `max_bytes` bytes without splitting a UTF-8 sequence and marks
// the cut with "...".
std::string truncate(std::string text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
  text.resize(cut);
  text += "...";
  return text;
}

std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Compact rendering that stops early once it is longer than `limit`, so describing a huge
// array costs no more than describing a small one.
void render(const Json& value, std::string& out, size_t limit) {
  if (out.size() > limit) return;
  if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const Json& element : value) {
      if (!first) out += ',';
      first = false;
      render(element, out, limit);
      if (out.size() > limit) return;
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, element] : value.items()) {
      if (!first) out += ',';
      first = false;
      out += dump(Json(key));
      out += ':';
      render(element, out, limit);
      if (out.size() > limit) return;
    }
    out += '}';
  } else {
    out += dump(value);
  }
}

// 1-based line and byte column of `offset` in `text`.
std::string line_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

// Rejects nesting deeper than kMaxJsonDepth before any parser sees the text: the DOM
// parser and destructor must never meet a document deep enough to exhaust the stack.
void check_depth(std::string_view text, std::string_view origin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character (it may be a quote)
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limits::kMaxJsonDepth) {
          throw FixtureError(error_line(origin, line_column(text, i),
                                        "expected at most " +
                                            std::to_string(limits::kMaxJsonDepth) +
                                            " levels of nested arrays and objects, got more"));
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
}

// Escapes what must not appear raw in a one-line message.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7F) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xF];
    } else {
      out += c;
    }
  }
  return out;
}

// Builds the DOM from SAX events and rejects duplicate keys (nlohmann would silently keep
// the last one). Errors are recorded, not thrown, so the parser unwinds normally.
class DomBuilder {
 public:
  Json root;

  struct Failure {
    size_t offset = 0;
    std::string where;  // a JSON path for duplicate keys, empty for syntax errors
    std::string message;
  };
  std::optional<Failure> failure;

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool value) { return put(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return put(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return put(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t&) { return put(Json(value)); }
  bool string(Json::string_t& value) { return put(Json(std::move(value))); }
  bool binary(Json::binary_t&) { return false; }  // not produced by the JSON parser

  bool start_object(size_t) { return open(Json::object()); }
  bool start_array(size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& name) {
    Frame& top = frames_.back();
    if (top.value->contains(name)) {
      failure = Failure{0, path_key(path_of_top(), name),
                        "duplicate field; expected each field at most once"};
      return false;
    }
    top.key = std::move(name);
    return true;
  }

  bool parse_error(size_t position, const std::string& last_token, const Json::exception& error) {
    std::string message = error.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 8: syntax error ..."
    if (const size_t bracket = message.find("] "); bracket != std::string::npos) {
      message.erase(0, bracket + 2);
    }
    if (message.rfind("parse error", 0) == 0) {
      if (const size_t colon = message.find(": "); colon != std::string::npos) {
        message.erase(0, colon + 2);
      }
    }
    // The last token read may be long or binary: keep a short, printable prefix of it.
    static constexpr std::string_view kLastRead = "; last read: '";
    if (const size_t start = message.find(kLastRead); start != std::string::npos) {
      std::string rest = message.substr(start + kLastRead.size());
      std::string tail;
      if (const size_t expected = rest.rfind("'; expected "); expected != std::string::npos) {
        tail = rest.substr(expected + 1);
        rest.resize(expected);
      } else if (!rest.empty() && rest.back() == '\'') {
        rest.pop_back();
      }
      message.resize(start);
      message += "; last read: '" + truncate(rest, 24) + "'" + tail;
    }
    // Number overflow is reported after the number: point at its first character.
    size_t offset = position > 0 ? position - 1 : 0;
    if (error.id == 406 && position >= last_token.size()) offset = position - last_token.size();
    failure = Failure{offset, "", "invalid JSON (" + message + ")"};
    return false;
  }

 private:
  struct Frame {
    Json* value;
    std::string key;  // objects: the key of the value being read
  };
  std::vector<Frame> frames_;

  Json* insert(Json value) {
    if (frames_.empty()) {
      root = std::move(value);
      return &root;
    }
    Frame& top = frames_.back();
    if (top.value->is_array()) {
      top.value->push_back(std::move(value));
      return &top.value->back();
    }
    Json& slot = (*top.value)[top.key];
    slot = std::move(value);
    return &slot;
  }

  bool put(Json value) {
    insert(std::move(value));
    return true;
  }

  // A container's address stays valid while it is open: its parent gains no other element
  // until it is closed (std::map nodes never move; a vector only grows after the close).
  bool open(Json container) {
    frames_.push_back(Frame{insert(std::move(container)), {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  std::string path_of_top() const {
    std::string path = "$";
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& frame = frames_[i];
      path = frame.value->is_array() ? path_index(path, frame.value->size() - 1)
                                     : path_key(path, frame.key);
    }
    return path;
  }
};

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

}  // namespace

std::string error_line(std::string_view origin, std::string_view where, std::string_view message) {
  std::string line(origin);
  line += ": ";
  if (!where.empty()) {
    line += where;
    line += ": ";
  }
  line += message;
  return printable(line);
}

Json parse_document(std::string_view text, std::string_view origin) {
  if (static_cast<int64_t>(text.size()) > limits::kMaxFixtureBytes) {
    throw FixtureError(error_line(origin, "",
                                  "expected at most " + std::to_string(limits::kMaxFixtureBytes) +
                                      " bytes, got " + std::to_string(text.size())));
  }
  check_depth(text, origin);
  DomBuilder builder;
  const bool ok = Json::sax_parse(text.begin(), text.end(), &builder);
  if (!ok || builder.failure) {
    DomBuilder::Failure failure =
        builder.failure ? *builder.failure
                        : DomBuilder::Failure{text.size(), "", "invalid JSON (parse failed)"};
    const std::string where =
        failure.where.empty() ? line_column(text, failure.offset) : failure.where;
    throw FixtureError(error_line(origin, where, failure.message));
  }
  return std::move(builder.root);
}

std::string describe(const Json& value) {
  std::string out;
  render(value, out, kDescribeBytes);
  return truncate(std::move(out), kDescribeBytes);
}

std::string path_key(std::string_view parent, std::string_view key) {
  std::string path(parent);
  if (is_identifier(key)) {
    path += '.';
    path += key;
  } else {
    path += '[';
    path += truncate(dump(Json(std::string(key))), kDescribeBytes);
    path += ']';
  }
  return path;
}

std::string path_index(std::string_view parent, size_t index) {
  std::string path(parent);
  path += '[';
  path += std::to_string(index);
  path += ']';
  return path;
}

std::string int_range_text(int64_t lo, int64_t hi) {
  if (lo <= INT_MIN && hi >= INT_MAX) return "an integer";
  if (lo == 0 && hi == std::numeric_limits<int64_t>::max()) return "a non-negative integer";
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string choices_text(std::initializer_list<std::string_view> choices, bool quoted) {
  std::string text = "one of ";
  bool first = true;
  for (std::string_view choice : choices) {
    if (!first) text += ", ";
    first = false;
    if (quoted) text += '"';
    text += choice;
    if (quoted) text += '"';
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// Node

void Node::fail(std::string_view message) const {
  throw FixtureError(error_line(origin_, path_, message));
}

void Node::expected(std::string_view what) const {
  std::string message = "expected ";
  message += what;
  message += ", got ";
  message += describe(*value_);
  // Say why a number that looks like an integer is not one.
  if (value_->is_number_float() && (what.find("integer") != std::string_view::npos)) {
    const double x = value_->get<double>();
    if (std::isfinite(x) && x == std::trunc(x)) {
      message += " (integers are written without a fraction or exponent)";
    }
  }
  fail(message);
}

int64_t Node::to_int64(int64_t lo, int64_t hi) const {
  if (value_->is_number_unsigned()) {
    const auto value = value_->get<uint64_t>();
    if (hi >= 0 && value <= static_cast<uint64_t>(hi) && static_cast<int64_t>(value) >= lo) {
      return static_cast<int64_t>(value);
    }
  } else if (value_->is_number_integer()) {
    const auto value = value_->get<int64_t>();
    if (value >= lo && value <= hi) return value;
  }
  expected(int_range_text(lo, hi));
}

int Node::to_int(int lo, int hi) const {
  return static_cast<int>(to_int64(lo, hi));
}

uint64_t Node::to_uint64() const {
  if (value_->is_number_unsigned()) return value_->get<uint64_t>();
  if (value_->is_number_integer() && value_->get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value_->get<int64_t>());
  }
  expected("an unsigned 64-bit integer in [0, 18446744073709551615]");
}

double Node::to_number() const {
  if (!value_->is_number()) expected("a number");
  return value_->get<double>();
}

bool Node::to_bool() const {
  if (!value_->is_boolean()) expected("true or false");
  return value_->get<bool>();
}

std::string Node::to_string(size_t max_bytes) const {
  if (!value_->is_string()) expected("a string");
  const auto& text = value_->get_ref<const Json::string_t&>();
  if (text.size() > max_bytes) {
    fail("expected a string of at most " + std::to_string(max_bytes) + " bytes, got " +
         std::to_string(text.size()) + " bytes");
  }
  return text;
}

std::string Node::to_choice(std::initializer_list<std::string_view> choices) const {
  if (value_->is_string()) {
    const auto& text = value_->get_ref<const Json::string_t&>();
    for (std::string_view choice : choices) {
      if (text == choice) return text;
    }
  }
  expected(choices_text(choices, true));
}

size_t Node::array_size(size_t max_size, std::string_view what) const {
  if (!value_->is_array()) expected(std::string("an array of ") + std::string(what));
  if (value_->size() > max_size) {
    fail("expected at most " + std::to_string(max_size) + " " + std::string(what) + ", got " +
         std::to_string(value_->size()));
  }
  return value_->size();
}

Node Node::at(size_t index) const {
  return Node((*value_)[index], path_index(path_, index), origin_);
}

Object Node::to_object(std::initializer_list<std::string_view> fields,
                       std::string_view context) const {
  if (!value_->is_object()) expected("an object");
  for (const auto& [key, value] : value_->items()) {
    if (std::find(fields.begin(), fields.end(), key) == fields.end()) {
      Node(value, path_key(path_, key), origin_)
          .fail("unknown field; expected " + choices_text(fields, false) + std::string(context));
    }
  }
  return Object(*this);
}

// ---------------------------------------------------------------------------------------
// Object

bool Object::has(std::string_view key) const {
  return node_.json().contains(key);
}

std::optional<Node> Object::get(std::string_view key) const {
  const auto it = node_.json().find(key);
  if (it == node_.json().end()) return std::nullopt;
  return Node(*it, path_key(node_.path(), key), node_.origin());
}

Node Object::need(std::string_view key, std::string_view what) const {
  if (auto node = get(key)) return *node;
  throw FixtureError(error_line(node_.origin(), path_key(node_.path(), key),
                                "missing; expected " + std::string(what)));
}

int Object::need_int(std::string_view key, int lo, int hi) const {
  return need(key, int_range_text(lo, hi)).to_int(lo, hi);
}

std::optional<int> Object::get_int(std::string_view key, int lo, int hi) const {
  if (auto node = get(key)) return node->to_int(lo, hi);
  return std::nullopt;
}

std::string Object::need_string(std::string_view key, size_t max_bytes) const {
  return need(key, "a string").to_string(max_bytes);
}

std::optional<std::string> Object::get_string(std::string_view key, size_t max_bytes) const {
  if (auto node = get(key)) return node->to_string(max_bytes);
  return std::nullopt;
}

std::string Object::need_choice(std::string_view key,
                                std::initializer_list<std::string_view> choices) const {
  return need(key, choices_text(choices, true)).to_choice(choices);
}

}  // namespace kvfuzz::json_reader
