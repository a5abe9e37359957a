#include "doors/exec_text.h"

#include <cstdio>

#include "support/utf8_text.h"

namespace kvfuzz::external {

std::string quote_excerpt(std::string_view text) {
  constexpr size_t kMostCharacters = 80;
  const SafeText excerpt = safe_utf8(text, Controls::escape, kMostCharacters);
  std::string quoted = "'" + excerpt.text + "'";
  if (excerpt.used < text.size()) quoted += "... (" + std::to_string(text.size()) + " bytes)";
  return quoted;
}

std::string describe_seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

}  // namespace kvfuzz::external
