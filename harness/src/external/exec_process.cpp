#include "exec_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include "exec_text.h"
#include "kvfuzz/engine.h"

namespace kvfuzz::external {

namespace {

using Clock = std::chrono::steady_clock;

// After the engine closed its stdout or stdin, how long to wait for it to exit and for the
// rest of its stderr: a Python traceback is written just before exit and often read after
// stdout's end of file.
constexpr std::chrono::milliseconds kEndingGrace{500};

std::string errno_text(int error) {
  return std::strerror(error);
}

// Milliseconds until `deadline` for poll(), rounded up (0 when past), at most `cap`.
int poll_wait(Clock::time_point deadline, std::chrono::milliseconds cap) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min(left, cap).count());
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
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

// In the child between fork() and exec: only async-signal-safe calls. The pipe ends are
// first moved above 2 (so that one already at 0, 1 or 2 is not overwritten by another's
// dup2), then onto 0, 1 and 2, which dup2 leaves open across exec. Every pipe of every
// engine is O_CLOEXEC, so no engine holds another's stdin open (which would keep it from
// ever seeing end of file). PR_SET_PDEATHSIG fires when the thread that forked ends:
// kvfuzz drives each engine from the thread that made it.
[[noreturn]] void exec_shell(const char* const* argv, int in, int out, int err, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);     // the engine never outlives kvfuzz
  if (getppid() != parent) _exit(127);  // kvfuzz died before prctl took effect
  const int high_in = fcntl(in, F_DUPFD_CLOEXEC, 3);
  const int high_out = fcntl(out, F_DUPFD_CLOEXEC, 3);
  const int high_err = fcntl(err, F_DUPFD_CLOEXEC, 3);
  if (high_in < 0 || high_out < 0 || high_err < 0) _exit(127);
  if (dup2(high_in, STDIN_FILENO) < 0 || dup2(high_out, STDOUT_FILENO) < 0 ||
      dup2(high_err, STDERR_FILENO) < 0) {
    _exit(127);
  }
  // A signal ignored or blocked here would stay so in the engine: give it the defaults.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv("/bin/sh", const_cast<char* const*>(argv));
  static const char message[] = "kvfuzz: cannot run /bin/sh\n";
  [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
  _exit(127);
}

}  // namespace

LineProcess::LineProcess(const std::string& command, std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  std::array<int, 2> in{-1, -1}, out{-1, -1}, err{-1, -1};
  const auto close_pipes = [&] {
    for (std::array<int, 2>* p : {&in, &out, &err}) {
      close_fd((*p)[0]);
      close_fd((*p)[1]);
    }
  };
  if (pipe2(in.data(), O_CLOEXEC) != 0 || pipe2(out.data(), O_CLOEXEC) != 0 ||
      pipe2(err.data(), O_CLOEXEC) != 0) {
    const int error = errno;
    close_pipes();
    throw EngineError("cannot start the engine: pipe: " + errno_text(error));
  }
  // Prepared before fork(): the child may not allocate.
  const char* const argv[] = {"sh", "-c", command.c_str(), nullptr};
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    const int error = errno;
    close_pipes();
    throw EngineError("cannot start the engine: fork: " + errno_text(error));
  }
  if (pid_ == 0) exec_shell(argv, in[0], out[1], err[1], parent);
  setpgid(pid_, pid_);  // here too, so that the group exists before the child runs
  close_fd(in[0]);
  close_fd(out[1]);
  close_fd(err[1]);
  stdin_ = in[1];
  stdout_ = out[0];
  stderr_fd_ = err[0];
  // Non-blocking on kvfuzz's side only: the engine's ends stay ordinary blocking pipes.
  for (const int fd : {stdin_, stdout_, stderr_fd_}) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
}

LineProcess::~LineProcess() {
  close();
}

std::string LineProcess::exchange(std::string_view request, std::string_view what,
                                  size_t max_reply_bytes) {
  if (failure_) throw EngineError(*failure_);
  const std::string name(what);
  pump(std::chrono::milliseconds(0));  // whatever it wrote since its last answer
  if (!reply_.empty()) {
    fail("the engine wrote a line nobody asked for before " + name + ": " + quote_excerpt(reply_));
  }
  std::string data(request);
  data += '\n';
  size_t written = 0;
  bool stdin_closed = false;  // then its answer (or how it ended) may still be on stdout
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (;;) {
    const size_t newline = reply_.find('\n');
    if (newline != std::string::npos) {
      std::string line = reply_.substr(0, newline);
      reply_.erase(0, newline + 1);
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
    if (reply_.size() > max_reply_bytes) {
      fail("the engine's answer to " + name + " ran past " + std::to_string(max_reply_bytes) +
           " bytes without a newline: " + quote_excerpt(reply_));
    }
    if (stdout_ < 0) fail_ended(name, stdin_closed ? "closed its stdin" : "closed its stdout");
    const int wait = poll_wait(deadline, std::chrono::milliseconds(INT_MAX));
    if (wait == 0) {
      fail("the engine did not answer " + name + " within " + describe_seconds(timeout_) +
           " (KVFUZZ_ENGINE_TIMEOUT); killed it" + stderr_suffix());
    }
    std::array<pollfd, 3> fds{};
    nfds_t count = 0;
    const auto watch = [&](int fd, short events) {
      if (fd < 0) return -1;
      fds[count] = pollfd{fd, events, 0};
      return static_cast<int>(count++);
    };
    const int in_at = written < data.size() && !stdin_closed ? watch(stdin_, POLLOUT) : -1;
    const int out_at = watch(stdout_, POLLIN);
    const int err_at = watch(stderr_fd_, POLLIN);
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
  const ssize_t n = write_without_sigpipe(stdin_, data.data() + written, data.size() - written);
  if (n >= 0) {
    written += static_cast<size_t>(n);
    return true;
  }
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

void LineProcess::read_stdout() {
  char buffer[65536];
  const ssize_t n = ::read(stdout_, buffer, sizeof buffer);
  if (n > 0) {
    reply_.append(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_fd(stdout_);
  }
}

void LineProcess::read_stderr() {
  char buffer[65536];
  const ssize_t n = ::read(stderr_fd_, buffer, sizeof buffer);
  if (n > 0) {
    stderr_.add(std::string_view(buffer, static_cast<size_t>(n)));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_fd(stderr_fd_);
  }
}

bool LineProcess::pump(std::chrono::milliseconds wait) {
  std::array<pollfd, 2> fds{};
  nfds_t count = 0;
  if (stdout_ >= 0) fds[count++] = pollfd{stdout_, POLLIN, 0};
  if (stderr_fd_ >= 0) fds[count++] = pollfd{stderr_fd_, POLLIN, 0};
  if (count == 0) return false;
  if (poll(fds.data(), count, static_cast<int>(wait.count())) <= 0) return true;
  for (size_t i = 0; i < count; ++i) {
    if (fds[i].revents == 0) continue;
    if (fds[i].fd == stdout_) {
      read_stdout();
    } else {
      read_stderr();
    }
  }
  return true;
}

bool LineProcess::has_exited() {
  if (exit_) return true;
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != ECHILD) return false;
    exit_ = Exit{false, false, 0};  // reaped behind our back: SIGCHLD is ignored
    return true;
  }
  if (info.si_pid == 0) return false;  // still running
  const bool signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  exit_ = Exit{true, signaled, info.si_status};
  return true;
}

void LineProcess::fail_ended(std::string_view what, std::string_view how) {
  // Give it a moment to exit and to finish its stderr, then say how it ended.
  const Clock::time_point deadline = Clock::now() + kEndingGrace;
  while (Clock::now() < deadline) {
    const bool exited = has_exited();
    if (exited && stderr_fd_ < 0) break;
    const std::chrono::milliseconds slice(poll_wait(deadline, std::chrono::milliseconds(20)));
    if (!pump(slice) && !exited) poll(nullptr, 0, 1);
  }
  std::string message = has_exited() ? "the engine " + describe_exit() + " before answering "
                                     : "the engine " + std::string(how) + " before answering ";
  message += what;
  // Whatever it printed last without a newline (a reply cut short) says where it stopped.
  const size_t newline = reply_.rfind('\n');
  const std::string unfinished = newline == std::string::npos ? reply_ : reply_.substr(newline + 1);
  if (!unfinished.empty()) message += "; its stdout ended with " + quote_excerpt(unfinished);
  fail(message + stderr_suffix());
}

std::string LineProcess::describe_exit() const {
  if (!exit_ || !exit_->known) return "ended (its exit status was taken by someone else)";
  const auto signal_text = [](int number) {
    const char* name = strsignal(number);
    return "signal " + std::to_string(number) +
           (name != nullptr ? " (" + std::string(name) + ")" : std::string());
  };
  if (exit_->signaled) return "was killed by " + signal_text(exit_->code);
  const std::string status = "exited (status " + std::to_string(exit_->code);
  // The shell in between reports a command that a signal killed as 128 + the signal.
  if (exit_->code > 128 && exit_->code < 128 + NSIG) {
    return status + ": under the shell, killed by " + signal_text(exit_->code - 128) + ")";
  }
  return status + ")";
}

std::string LineProcess::stderr_suffix() const {
  const std::string tail = stderr_.text();
  return tail.empty() ? "; nothing on its stderr" : "; its stderr ended: " + tail;
}

void LineProcess::fail(const std::string& message) {
  failure_ = message;
  kill_group_and_reap();
  close_fds();
  throw EngineError(message);
}

void LineProcess::kill_group_and_reap() {
  if (pid_ <= 0 || reaped_) return;
  // The group reaches whatever the engine started; the leader is named on its own too in
  // case setpgid failed. pid_ is not reaped yet, so neither id can belong to another.
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void LineProcess::close() {
  if (pid_ > 0 && !reaped_) {
    close_fd(stdin_);  // end of file: a well-behaved engine exits now
    const Clock::time_point deadline = Clock::now() + kExitGrace;
    while (!has_exited() && Clock::now() < deadline) {
      // Its output is read and dropped meanwhile, so that it cannot block on a full pipe.
      const std::chrono::milliseconds slice(poll_wait(deadline, std::chrono::milliseconds(50)));
      if (!pump(slice)) poll(nullptr, 0, 1);
      reply_.clear();
    }
    kill_group_and_reap();
  }
  close_fds();
}

void LineProcess::close_fds() {
  close_fd(stdin_);
  close_fd(stdout_);
  close_fd(stderr_fd_);
}

}  // namespace kvfuzz::external
