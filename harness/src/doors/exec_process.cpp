#include "doors/exec_process.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "kvfuzz/engine.h"
#include "support/text.h"

namespace kvfuzz::doors {

namespace {

using Clock = std::chrono::steady_clock;

// After the engine closed its stdout or stdin, how long to wait for it to exit and for the
// rest of its stderr: a Python traceback is written just before exit and often read after
// stdout's end of file.
constexpr std::chrono::milliseconds kEndingGrace{500};

// Milliseconds until `deadline` for poll(), rounded up (0 when past), at most `cap`.
int poll_wait(Clock::time_point deadline, std::chrono::milliseconds cap) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min(left, cap).count());
}

// write() that turns a closed pipe into EPIPE without a SIGPIPE for kvfuzz: SIGPIPE is
// blocked for this thread during the write, and one it raised is taken back out of the
// pending set, unless one was already pending before (then it was not ours).
ssize_t write_without_sigpipe(int fd, const char* data, size_t size) {
  sigset_t sigpipe;
  sigemptyset(&sigpipe);
  sigaddset(&sigpipe, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  const bool already_pending = sigismember(&pending, SIGPIPE) == 1;
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &sigpipe, &previous);
  const ssize_t written = ::write(fd, data, size);
  const int error = errno;
  if (written < 0 && error == EPIPE && !already_pending) {
    const timespec no_wait{0, 0};
    while (sigtimedwait(&sigpipe, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = error;
  return written;
}

// The engine: `/bin/sh -c command` with a pipe on each of stdin, stdout and stderr.
GuardedProcess start_engine(const std::string& command) {
  ProcessSpec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", command};
  spec.stdin_pipe = true;
  spec.name = "the engine";
  try {
    return GuardedProcess(spec);
  } catch (const ProcessError& e) {
    throw EngineError(std::string("cannot start the engine: ") + e.what());
  }
}

}  // namespace

LineProcess::LineProcess(const std::string& command, std::chrono::milliseconds timeout)
    : timeout_(timeout), process_(start_engine(command)), owner_(getpid()) {}

bool LineProcess::usable() {
  // In a forked child has_exited() would say so too (the engine is no child of its, so
  // waitid() finds none), but that is an accident of waitid(); the owner says it plainly.
  if (failure_ || process_.ended() || getpid() != owner_) return false;
  pump(std::chrono::milliseconds(0));
  return reply_.empty() && process_.stdout_fd() >= 0 && !process_.has_exited();
}

LineProcess::~LineProcess() {
  close();
}

std::string LineProcess::exchange(std::string_view request, std::string_view what,
                                  size_t max_reply_bytes,
                                  std::optional<std::chrono::milliseconds> timeout) {
  if (failure_) throw EngineError(*failure_);
  if (getpid() != owner_) {
    // Its pipes are shared with the parent, which may be talking to it: a line written
    // here would corrupt both conversations. Refused, and the process left alone.
    throw EngineError("the engine's process belongs to kvfuzz process " + std::to_string(owner_) +
                      ", not to this one forked from it; make the engine after fork()");
  }
  const std::string name(what);
  pump(std::chrono::milliseconds(0));  // whatever it wrote since its last answer
  if (!reply_.empty()) {
    fail("the engine wrote a line nobody asked for before " + name + ": " +
         quote_excerpt(std::string_view(reply_).substr(0, reply_.find('\n'))));
  }
  std::string data(request);
  data += '\n';
  size_t written = 0;
  bool stdin_closed = false;  // then its answer (or how it ended) may still be on stdout
  const std::chrono::milliseconds limit = timeout.value_or(timeout_);
  const Clock::time_point deadline = Clock::now() + limit;
  for (;;) {
    // Only the bytes read since the last look: a long reply costs one scan, not one per read.
    const size_t newline = reply_.find('\n', scanned_);
    if (newline != std::string::npos) {
      std::string line = reply_.substr(0, newline);
      reply_.erase(0, newline + 1);
      scanned_ = 0;
      if (written < data.size()) {
        fail("the engine answered " + name + " before reading all of it: " + quote_excerpt(line));
      }
      if (!reply_.empty()) {
        fail("the engine wrote more than one line in answer to " + name +
             "; the second began: " + quote_excerpt(reply_));
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    scanned_ = reply_.size();
    if (reply_.size() > max_reply_bytes) {
      fail("the engine's answer to " + name + " ran past " + std::to_string(max_reply_bytes) +
           " bytes without a newline: " + quote_excerpt(reply_));
    }
    if (process_.stdout_fd() < 0)
      fail_ended(name, stdin_closed ? "closed its stdin" : "closed its stdout");
    const int wait = poll_wait(deadline, std::chrono::milliseconds(INT_MAX));
    if (wait == 0) {
      fail("the engine did not answer " + name + " within " + describe_seconds(limit) +
               " (KVFUZZ_ENGINE_TIMEOUT); killed it" + stderr_suffix(),
           /*hung=*/true);
    }
    std::array<pollfd, 3> fds{};
    nfds_t count = 0;
    const auto watch = [&](int fd, short events) {
      if (fd < 0) return -1;
      fds[count] = pollfd{fd, events, 0};
      return static_cast<int>(count++);
    };
    const int in_at =
        written < data.size() && !stdin_closed ? watch(process_.stdin_fd(), POLLOUT) : -1;
    const int out_at = watch(process_.stdout_fd(), POLLIN);
    const int err_at = watch(process_.stderr_fd(), POLLIN);
    if (poll(fds.data(), count, wait) < 0) {
      if (errno == EINTR) continue;
      fail("cannot wait for the engine: poll: " + errno_text(errno));
    }
    const auto ready = [&](int at) { return at >= 0 && fds[static_cast<size_t>(at)].revents != 0; };
    if (ready(in_at) && !write_some(data, written)) stdin_closed = true;
    if (ready(out_at)) read_stdout();
    if (ready(err_at)) read_stderr();
  }
}

bool LineProcess::write_some(std::string_view data, size_t& written) {
  const ssize_t n =
      write_without_sigpipe(process_.stdin_fd(), data.data() + written, data.size() - written);
  if (n >= 0) {
    written += static_cast<size_t>(n);
    return true;
  }
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

void LineProcess::read_stdout() {
  char buffer[65536];
  const ssize_t n = ::read(process_.stdout_fd(), buffer, sizeof buffer);
  if (n > 0) {
    reply_.append(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    process_.close_stdout();
  }
}

void LineProcess::read_stderr() {
  char buffer[65536];
  const ssize_t n = ::read(process_.stderr_fd(), buffer, sizeof buffer);
  if (n > 0) {
    stderr_.add(std::string_view(buffer, static_cast<size_t>(n)));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    process_.close_stderr();
  }
}

bool LineProcess::pump(std::chrono::milliseconds wait) {
  std::array<pollfd, 2> fds{};
  nfds_t count = 0;
  const int out = process_.stdout_fd(), err = process_.stderr_fd();
  if (out >= 0) fds[count++] = pollfd{out, POLLIN, 0};
  if (err >= 0) fds[count++] = pollfd{err, POLLIN, 0};
  if (count == 0) return false;
  if (poll(fds.data(), count, static_cast<int>(wait.count())) <= 0) return true;
  for (size_t i = 0; i < count; ++i) {
    if (fds[i].revents == 0) continue;
    if (fds[i].fd == out) {
      read_stdout();
    } else {
      read_stderr();
    }
  }
  return true;
}

void LineProcess::fail_ended(std::string_view what, std::string_view how) {
  // Give it a moment to exit and to finish its stderr, then say how it ended.
  const Clock::time_point deadline = Clock::now() + kEndingGrace;
  while (Clock::now() < deadline) {
    const bool exited = process_.has_exited();
    if (exited && process_.stderr_fd() < 0) break;
    const std::chrono::milliseconds slice(poll_wait(deadline, std::chrono::milliseconds(20)));
    if (!pump(slice) && !exited) poll(nullptr, 0, 1);
  }
  std::string message = process_.has_exited()
                            ? "the engine " + describe_exit() + " before answering "
                            : "the engine " + std::string(how) + " before answering ";
  message += what;
  // Whatever it printed last without a newline (a reply cut short) says where it stopped.
  const size_t newline = reply_.rfind('\n');
  const std::string unfinished = newline == std::string::npos ? reply_ : reply_.substr(newline + 1);
  if (!unfinished.empty()) message += "; its stdout ended with " + quote_excerpt(unfinished);
  fail(message + stderr_suffix());
}

std::string LineProcess::describe_exit() const {
  const std::optional<ProcessExit>& exit = process_.exit();
  if (!exit || !exit->known) return "ended (its exit status was taken by someone else)";
  const auto signal_text = [](int number) {
    const char* name = strsignal(number);
    return "signal " + std::to_string(number) +
           (name != nullptr ? " (" + std::string(name) + ")" : std::string());
  };
  if (exit->signaled) return "was killed by " + signal_text(exit->code);
  const std::string status = "exited (status " + std::to_string(exit->code);
  // The shell in between reports a command that a signal killed as 128 + the signal.
  if (exit->code > 128 && exit->code < 128 + NSIG) {
    return status + ": under the shell, killed by " + signal_text(exit->code - 128) + ")";
  }
  return status + ")";
}

std::string LineProcess::stderr_suffix() const {
  const std::string tail = stderr_.text();
  return tail.empty() ? "; nothing on its stderr" : "; its stderr ended: " + tail;
}

void LineProcess::fail(const std::string& message, bool hung) {
  failure_ = message + process_.kill_and_reap();
  process_.close_pipes();
  if (hung) throw EngineTimeout(*failure_);
  throw EngineError(*failure_);
}

void LineProcess::close() {
  if (!process_.ended()) {
    process_.close_stdin();  // end of file: a well-behaved engine exits now
    const Clock::time_point deadline = Clock::now() + kExitGrace;
    while (!process_.has_exited() && Clock::now() < deadline) {
      // Its output is read and dropped meanwhile, so that it cannot block on a full pipe.
      const std::chrono::milliseconds slice(poll_wait(deadline, std::chrono::milliseconds(50)));
      if (!pump(slice)) poll(nullptr, 0, 1);
      reply_.clear();
      scanned_ = 0;
    }
  }
  const std::string left = process_.kill_and_reap();
  // A destructor has no one to tell but the user.
  if (!left.empty()) std::fprintf(stderr, "kvfuzz: ending an exec: engine%s\n", left.c_str());
  process_.close_pipes();
}

}  // namespace kvfuzz::doors
