// The last few lines an engine process wrote to its stderr. An engine's stderr is its own
// (kvfuzz never echoes it), but when the engine fails, its last words usually say why: a
// Python traceback ends with the exception, a shell says "foo: not found". Those go into
// the error message; everything before them is dropped as it arrives.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace kvfuzz::doors {

class StderrTail {
 public:
  // Bytes as read from the pipe, in any pieces.
  void add(std::string_view bytes);
  // The last lines (at most kLines, each cut to kLineChars characters and made valid
  // UTF-8 on one line, support/text.h), joined with " | "; empty when nothing but blank
  // lines arrived.
  std::string text() const;

  static constexpr size_t kLines = 3;
  static constexpr size_t kLineChars = 200;
  static constexpr size_t kLineBytes = 4 * kLineChars;  // enough for kLineChars characters

 private:
  void end_line();

  std::deque<std::string> lines_;
  std::string partial_;        // the line being written, without its indentation; its first
                               // kLineBytes bytes, as they came
  size_t partial_length_ = 0;  // its length in bytes, all of it
};

}  // namespace kvfuzz::doors
