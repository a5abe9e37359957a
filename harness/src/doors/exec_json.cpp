#include "doors/exec_json.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "kvfuzz/engine.h"
#include "support/text.h"

namespace kvfuzz::doors {

namespace {

constexpr std::string_view kNonFinite[] = {"-Infinity", "Infinity", "NaN"};

// The line with every non-finite token outside a string quoted; the line itself when it
// holds none (the common case costs one scan).
std::string quote_non_finite_tokens(std::string_view line) {
  if (line.find("NaN") == std::string_view::npos &&
      line.find("Infinity") == std::string_view::npos) {
    return std::string(line);
  }
  std::string out;
  out.reserve(line.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) {
        out += line[++i];  // an escaped character, perhaps a quote
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const std::string_view token : kNonFinite) {
      if (line.substr(i, token.size()) == token) {
        out += '"';
        out += token;
        out += '"';
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace

void append_number(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "Infinity" : "-Infinity";
  } else {
    char text[32];
    const auto result = std::to_chars(text, text + sizeof text, value);
    out.append(text, result.ptr);
  }
}

nlohmann::json parse_reply_line(std::string_view line, std::string_view what) {
  if (line.find_first_not_of(" \t") == std::string_view::npos) {
    throw EngineError("the engine's answer to " + std::string(what) +
                      " is an empty line; expected one JSON object");
  }
  const std::string text = quote_non_finite_tokens(line);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts in the rewritten text; close enough to point at the trouble.
    throw EngineError("the engine's answer to " + std::string(what) +
                      " is not JSON (stopped at byte " + std::to_string(e.byte) +
                      "): " + quote_excerpt(line));
  }
}

bool read_number(const nlohmann::json& value, double& out) {
  if (value.is_number()) {
    out = value.get<double>();
    return true;
  }
  if (value.is_null()) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (!value.is_string()) return false;
  const auto& text = value.get_ref<const std::string&>();
  if (text == "NaN") {
    out = std::numeric_limits<double>::quiet_NaN();
  } else if (text == "Infinity") {
    out = std::numeric_limits<double>::infinity();
  } else if (text == "-Infinity") {
    out = -std::numeric_limits<double>::infinity();
  } else {
    return false;
  }
  return true;
}

}  // namespace kvfuzz::doors
