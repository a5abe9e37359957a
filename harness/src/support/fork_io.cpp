#include "support/fork_io.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvfuzz {

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? "SIG" + std::string(abbrev) : "signal " + std::to_string(signal);
}

std::string end_signature(int wait_status) {
  if (WIFSIGNALED(wait_status)) return "crash/" + signal_name(WTERMSIG(wait_status));
  return "exit/" + std::to_string(WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1);
}

std::optional<std::string> sanitizer_signature(std::string_view stderr_tail) {
  static constexpr std::pair<std::string_view, std::string_view> kSanitizers[] = {
      {"AddressSanitizer", "asan"},
      {"UndefinedBehaviorSanitizer", "ubsan"},
      {"ThreadSanitizer", "tsan"},
      {"MemorySanitizer", "msan"}};
  // The last SUMMARY line: a report's own, after whatever the engine printed before it.
  const size_t at = stderr_tail.rfind("SUMMARY: ");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view line = stderr_tail.substr(at + 9);
  line = line.substr(0, line.find('\n'));
  for (const auto& [name, abbrev] : kSanitizers) {
    if (!line.starts_with(name) || !line.substr(name.size()).starts_with(": ")) continue;
    std::string_view kind = line.substr(name.size() + 2);
    kind = kind.substr(0, kind.find(' '));
    if (kind.empty()) return std::nullopt;
    if (abbrev == "asan" && kind == "SEGV") return "crash/SIGSEGV";
    // LeakSanitizer's summary reads "AddressSanitizer: 24 byte(s) leaked in 1 allocation(s)."
    if (kind.find_first_not_of("0123456789") == std::string_view::npos) kind = "leak";
    return std::string(abbrev) + "/" + std::string(kind);
  }
  return std::nullopt;
}

}  // namespace kvfuzz
