#include "exec_stderr_tail.h"

namespace kvfuzz::external {

void StderrTail::add(std::string_view bytes) {
  for (const char c : bytes) {
    // '\r' ends a line too: progress bars redraw themselves with it.
    if (c == '\n' || c == '\r') {
      end_line();
      continue;
    }
    ++partial_length_;
    if (partial_.size() < kLineChars) {
      // One line of printable text in the message, whatever the engine wrote.
      const auto byte = static_cast<unsigned char>(c);
      partial_ += (byte >= 0x20 && byte != 0x7f) || byte >= 0x80 ? c : '?';
    }
  }
}

void StderrTail::end_line() {
  const size_t first = partial_.find_first_not_of(" \t");
  if (first != std::string::npos) {
    std::string line = partial_.substr(first);
    if (partial_length_ > kLineChars) line += "...";
    lines_.push_back(std::move(line));
    if (lines_.size() > kLines) lines_.pop_front();
  }
  partial_.clear();
  partial_length_ = 0;
}

std::string StderrTail::text() const {
  std::string text;
  const auto append = [&](const std::string& line) {
    if (!text.empty()) text += " | ";
    text += line;
  };
  // The unfinished line counts as the last one (a process killed mid-line).
  StderrTail copy = *this;
  copy.end_line();
  for (const std::string& line : copy.lines_) append(line);
  return text;
}

}  // namespace kvfuzz::external
