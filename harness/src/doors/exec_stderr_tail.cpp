#include "doors/exec_stderr_tail.h"

#include "support/text.h"

namespace kvfuzz::doors {

void StderrTail::add(std::string_view bytes) {
  for (const char c : bytes) {
    // '\r' ends a line too: progress bars redraw themselves with it.
    if (c == '\n' || c == '\r') {
      end_line();
      continue;
    }
    if (partial_length_ == 0 && (c == ' ' || c == '\t')) continue;  // indentation
    ++partial_length_;
    // Raw bytes: a character may arrive split over two reads, so the line is made valid
    // UTF-8 only when it ends. kLineChars characters take at most 4 bytes each.
    if (partial_.size() < kLineBytes) partial_ += c;
  }
}

void StderrTail::end_line() {
  if (!partial_.empty()) {
    SafeText line = safe_utf8(partial_, Controls::blank, kLineChars);
    if (line.used < partial_length_) line.text += "...";
    lines_.push_back(std::move(line.text));
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

}  // namespace kvfuzz::doors
