#include "check/fork_io.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvfuzz::check {

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

}  // namespace kvfuzz::check
