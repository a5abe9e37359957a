#include "exec_text.h"

#include <cstdio>

namespace kvfuzz::external {

std::string quote_excerpt(std::string_view text) {
  constexpr size_t kMost = 80;
  std::string quoted = "'";
  for (size_t i = 0; i < text.size() && i < kMost; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\n') {
      quoted += "\\n";
    } else if (byte == '\r') {
      quoted += "\\r";
    } else if (byte == '\t') {
      quoted += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      quoted += escaped;
    } else {
      quoted += text[i];
    }
  }
  quoted += "'";
  if (text.size() > kMost) quoted += "... (" + std::to_string(text.size()) + " bytes)";
  return quoted;
}

std::string describe_seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

}  // namespace kvfuzz::external
