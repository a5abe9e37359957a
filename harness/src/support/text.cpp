#include "support/text.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>

namespace kvfuzz {

namespace {

bool in(unsigned char byte, unsigned char low, unsigned char high) {
  return byte >= low && byte <= high;
}

void append_hex_byte(std::string& out, unsigned char byte) {
  char escaped[8];
  std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned>(byte));
  out += escaped;
}

void append_code_point(std::string& out, uint32_t code_point) {
  char escaped[12];
  std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(code_point));
  out += escaped;
}

// The code point of a well-formed sequence of `length` bytes.
uint32_t decode(std::string_view bytes, size_t length) {
  const auto b = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]));
  };
  switch (length) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    case 3:
      return ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    default:
      return ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) |
             (b(3) & 0x3Fu);
  }
}

}  // namespace

size_t utf8_character_length(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char first = at(0);
  if (first < 0x80) return 1;
  // Unicode's table of well-formed byte sequences (The Unicode Standard, table 3-7): the
  // second byte's range depends on the first, which rules out overlong forms, surrogates
  // and code points past U+10FFFF; every later byte is 80..BF.
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (in(first, 0xC2, 0xDF)) {
    length = 2;
  } else if (first == 0xE0) {
    length = 3;
    low = 0xA0;
  } else if (in(first, 0xE1, 0xEC) || in(first, 0xEE, 0xEF)) {
    length = 3;
  } else if (first == 0xED) {
    length = 3;
    high = 0x9F;
  } else if (first == 0xF0) {
    length = 4;
    low = 0x90;
  } else if (in(first, 0xF1, 0xF3)) {
    length = 4;
  } else if (first == 0xF4) {
    length = 4;
    high = 0x8F;
  } else {
    return 0;  // 80..C1 and F5..FF never start a character
  }
  if (bytes.size() < length || !in(at(1), low, high)) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (!in(at(i), 0x80, 0xBF)) return 0;
  }
  return length;
}

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_character_length(text.substr(i));
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

SafeText safe_utf8(std::string_view bytes, Controls controls, size_t max_characters) {
  SafeText result;
  std::string& out = result.text;
  out.reserve(bytes.size() < 256 ? bytes.size() : 256);
  size_t i = 0;
  for (size_t characters = 0; i < bytes.size() && characters < max_characters; ++characters) {
    const size_t length = utf8_character_length(bytes.substr(i));
    if (length == 0) {
      append_hex_byte(out, static_cast<unsigned char>(bytes[i]));
      ++i;
      continue;
    }
    const uint32_t code_point = decode(bytes.substr(i), length);
    const bool line_break = code_point == '\n' || code_point == '\r' || code_point == 0x85 ||
                            code_point == 0x2028 || code_point == 0x2029;
    const bool control = code_point < 0x20 || (code_point >= 0x7F && code_point < 0xA0) ||
                         code_point == 0x2028 || code_point == 0x2029;
    if (!control) {
      out.append(bytes.substr(i, length));
    } else if (controls == Controls::blank && (line_break || code_point == '\t')) {
      out += ' ';
    } else if (code_point == '\n') {
      out += "\\n";
    } else if (code_point == '\r') {
      out += "\\r";
    } else if (code_point == '\t') {
      out += "\\t";
    } else if (code_point < 0x80) {
      append_hex_byte(out, static_cast<unsigned char>(code_point));
    } else {
      append_code_point(out, code_point);
    }
    i += length;
  }
  result.used = i;
  return result;
}

std::string quote_excerpt(std::string_view text, size_t max_characters) {
  const SafeText excerpt = safe_utf8(text, Controls::escape, max_characters);
  std::string quoted = "'" + excerpt.text + "'";
  if (excerpt.used < text.size()) quoted += "... (" + std::to_string(text.size()) + " bytes)";
  return quoted;
}

std::string one_line(std::string_view text, size_t max_characters) {
  SafeText line = safe_utf8(text, Controls::blank, max_characters);
  if (line.used < text.size()) line.text += "...";
  return std::move(line.text);
}

std::string escape_controls(std::string_view text) {
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

std::string cut_bytes(std::string text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
  text.resize(cut);
  text += "...";
  return text;
}

std::string describe_seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

std::string markup_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default: {
        const auto u = static_cast<unsigned char>(c);
        out += u < 0x20 && c != '\t' && c != '\n' && c != '\r' ? '?' : c;
      }
    }
  }
  return out;
}

std::string shell_word(std::string_view word) {
  const auto plain = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("_-./:,=+@%").find(c) != std::string_view::npos;
  };
  if (!word.empty() && std::all_of(word.begin(), word.end(), plain)) return std::string(word);
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string first_line(std::string_view text) {
  return std::string(text.substr(0, text.find('\n')));
}

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

}  // namespace kvfuzz
