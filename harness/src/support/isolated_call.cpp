#include "support/isolated_call.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/fork_io.h"

namespace kvfuzz {

namespace {

using Clock = std::chrono::steady_clock;

// The child: `work`, then its answer as a size and the bytes, then _exit (not exit: this
// process's static destructors and atexit handlers are not the child's).
[[noreturn]] void child_main(const std::function<std::string()>& work, int answer) {
  // What an engine prints on stdout must not mix with the command's own output.
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  std::string text;
  try {
    text = work();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(nullptr);
    ::_exit(70);
  } catch (...) {
    ::_exit(70);
  }
  const uint64_t size = text.size();
  write_all(answer, &size, sizeof size);
  write_all(answer, text.data(), text.size());
  std::fflush(nullptr);
  ::_exit(0);
}

// Reaps `pid`, killing it first when it is still there at `deadline`. Returns its status.
int reap(pid_t pid, Clock::time_point deadline, bool& killed) {
  int status = 0;
  killed = false;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return status;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    }
    ::usleep(1000);
  }
}

std::string read_all_of(std::FILE* file) {
  std::string text;
  std::rewind(file);
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  return text;
}

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error("kvfuzz: " + what + ": " + std::strerror(errno));
}

IsolatedEnd end_of(int status, bool killed, std::chrono::milliseconds timeout,
                   std::string child_stderr) {
  IsolatedEnd end;
  end.stderr_tail = std::move(child_stderr);
  if (killed) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", std::chrono::duration<double>(timeout).count());
    end.signature = "timeout";
    end.how = std::string("was still running after ") + limit + " s (now killed)";
    return end;
  }
  const std::optional<std::string> sanitizer =
      WIFSIGNALED(status) ? std::nullopt : sanitizer_signature(end.stderr_tail);
  end.signature = sanitizer ? *sanitizer : end_signature(status);
  if (WIFSIGNALED(status)) {
    end.how = "died of " + signal_name(WTERMSIG(status));
  } else if (end.signature == "crash/SIGSEGV") {
    end.how = "died of SIGSEGV";  // caught and reported by AddressSanitizer, which then exited
  } else if (sanitizer) {
    end.how = "was stopped by its sanitizer (" + end.signature + ")";
  } else {
    end.how = "exited with status " + end.signature.substr(5);
  }
  return end;
}

}  // namespace

IsolatedAnswer call_isolated(const std::function<std::string()>& work,
                             std::chrono::milliseconds timeout) {
  int answer[2];
  if (::pipe2(answer, O_CLOEXEC) != 0) throw system_error("pipe");
  // A file, not a pipe, so that the child can never block on its stderr.
  std::FILE* errors = std::tmpfile();
  if (errors == nullptr) {
    ::close(answer[0]);
    ::close(answer[1]);
    throw system_error("tmpfile");
  }
  std::fflush(nullptr);  // nothing buffered may be written twice, once by the child
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(answer[0]);
    ::close(answer[1]);
    std::fclose(errors);
    throw system_error("fork");
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // it dies with the command
    if (::getppid() != parent) ::_exit(1);
    ::close(answer[0]);
    ::dup2(::fileno(errors), STDERR_FILENO);
    child_main(work, answer[1]);
  }
  ::close(answer[1]);
  const auto deadline = Clock::now() + timeout;
  std::string pending;
  bool whole = false;
  while (!whole && Clock::now() < deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{answer[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::clamp<long>(left, 1, 100)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[65536];
    const ssize_t n = ::read(answer[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed: the child ended
    pending.append(buffer, static_cast<size_t>(n));
    uint64_t size = 0;
    if (pending.size() >= sizeof size) {
      std::memcpy(&size, pending.data(), sizeof size);
      whole = pending.size() >= sizeof size + size;
    }
  }
  ::close(answer[0]);
  bool killed = false;
  // Once it answered, it only has to exit: a moment more, however little time is left.
  const int status = reap(
      pid, whole ? std::max(deadline, Clock::now() + std::chrono::seconds(1)) : deadline, killed);
  std::string child_stderr = read_all_of(errors);
  std::fclose(errors);
  IsolatedAnswer result;
  if (!whole) {
    result.ended = end_of(status, killed, timeout, std::move(child_stderr));
    return result;
  }
  std::fputs(child_stderr.c_str(), stderr);  // what the engine said while it worked
  result.answer = pending.substr(sizeof(uint64_t));
  return result;
}

std::string describe_end(const IsolatedEnd& end, const std::string& doing) {
  std::string text = "the engine " + end.how + " while " + doing + " (in a child process)";
  // Its last lines of stderr: a sanitizer's report or a Python stack ends there.
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < end.stderr_tail.size()) {
    const size_t nl = std::min(end.stderr_tail.find('\n', start), end.stderr_tail.size());
    if (nl > start) lines.push_back(end.stderr_tail.substr(start, nl - start));
    start = nl + 1;
  }
  if (lines.empty()) return text;
  text += "; its last stderr:";
  for (size_t i = lines.size() > 40 ? lines.size() - 40 : 0; i < lines.size(); ++i) {
    text += "\n" + lines[i];
  }
  return text;
}

}  // namespace kvfuzz
