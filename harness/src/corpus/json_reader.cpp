#include "corpus/json_reader.h"

#include <algorithm>
#include <cmath>

#include "kvfuzz/fixture_io.h"
#include "kvfuzz/limits.h"
#include "support/text.h"

namespace kvfuzz::json_reader {

namespace {

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
      message += "; last read: '" + cut_bytes(rest, 24) + "'" + tail;
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

}  // namespace

std::string error_line(std::string_view origin, std::string_view where, std::string_view message) {
  std::string line(origin);
  line += ": ";
  if (!where.empty()) {
    line += where;
    line += ": ";
  }
  line += message;
  return escape_controls(line);
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

std::exception_ptr FixtureReport::error(const std::string& path, std::string_view message) const {
  return std::make_exception_ptr(FixtureError(error_line(origin_, path, message)));
}

std::string FixtureReport::got(const Json* value, std::string_view expected) const {
  std::string text = JsonReport::got(value, expected);
  // Say why a number that looks like an integer is not one.
  if (value != nullptr && value->is_number_float() &&
      expected.find("integer") != std::string_view::npos) {
    const double x = value->get<double>();
    if (std::isfinite(x) && x == std::trunc(x)) {
      text += " (integers are written without a fraction or exponent)";
    }
  }
  return text;
}

}  // namespace kvfuzz::json_reader
