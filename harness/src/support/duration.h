// A duration as people write it on a command line (kvfuzz campaign --time).
#pragma once

#include <optional>
#include <string_view>

namespace kvfuzz {

// "90", "90s", "30m", "8h", "1h30m", "2d": seconds. Nothing when malformed, zero, or
// beyond ten years.
std::optional<double> parse_duration(std::string_view text);

}  // namespace kvfuzz
