// How the exec: door quotes what an engine wrote and the durations it waited, in one-line
// error messages.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace kvfuzz::external {

// 'text' as valid UTF-8 with control characters and bytes that are not UTF-8 escaped
// (utf8_text.h), cut after 80 characters ("'abc'... (5120 bytes)"), so that a message
// stays one readable line, fit for a fixture, whatever the engine wrote.
std::string quote_excerpt(std::string_view text);

// "1 s", "0.25 s".
std::string describe_seconds(std::chrono::milliseconds duration);

}  // namespace kvfuzz::external
