#include "support/duration.h"

#include <charconv>
#include <cmath>

namespace kvfuzz {

std::optional<double> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double total = 0;
  while (!text.empty()) {
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end == text.data() || value < 0) return std::nullopt;
    text.remove_prefix(static_cast<size_t>(end - text.data()));
    double unit = 1;
    if (!text.empty()) {
      switch (text.front()) {
        case 's':
          unit = 1;
          break;
        case 'm':
          unit = 60;
          break;
        case 'h':
          unit = 3600;
          break;
        case 'd':
          unit = 86400;
          break;
        default:
          return std::nullopt;
      }
      text.remove_prefix(1);
    } else if (total > 0) {
      return std::nullopt;  // "1h30": a bare number only on its own
    }
    total += value * unit;
  }
  // No infinities or NaNs (from_chars reads "inf"), and nothing beyond ten years.
  if (!std::isfinite(total) || total <= 0 || total > 10 * 365 * 86400.0) return std::nullopt;
  return total;
}

}  // namespace kvfuzz
