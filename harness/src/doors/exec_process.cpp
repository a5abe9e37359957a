#include "doors/exec_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

namespace kvfuzz::external {

namespace {

using Clock = std::chrono::steady_clock;

// After the engine closed its stdout or stdin, how long to wait for it to exit and for the
// rest of its stderr: a Python traceback is written just before exit and often read after
// stdout's end of file.
constexpr std::chrono::milliseconds kEndingGrace{500};

// The guard's program (see LineProcess::start_guard): wait for end of file on stdin, the
// lifeline, then kill the process group it leads, itself included. Nothing ever writes to
// the lifeline, so `read` returns only at its end.
constexpr const char* kGuardScript = "while read -r line; do :; done; kill -KILL 0";

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

// True while `pid` is a child of ours that nobody has reaped: running, or a zombie. While
// that holds, neither its pid nor a process group it is in can be given to another
// process, so a signal sent to either reaches only what it should.
bool unreaped_child(pid_t pid) {
  if (pid <= 0) return false;
  siginfo_t info{};
  for (;;) {
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
      return true;
    }
    if (errno != EINTR) return false;  // ECHILD: reaped, by us or (SIGCHLD ignored) the kernel
  }
}

// Reaps `pid`, a child of ours that was sent SIGKILL, waiting until `deadline` at most.
// False when it is still there then.
bool reap(pid_t pid, Clock::time_point deadline) {
  if (pid <= 0) return true;
  int pause_ms = 1;
  for (;;) {
    const pid_t reaped = waitpid(pid, nullptr, WNOHANG);
    if (reaped == pid) return true;
    if (reaped < 0 && errno != EINTR) return true;  // ECHILD: reaped already (SIGCHLD ignored)
    if (reaped == 0) {
      if (Clock::now() >= deadline) return false;
      poll(nullptr, 0, pause_ms);
      pause_ms = std::min(pause_ms * 2, 20);
    }
  }
}

// Async-signal-safe, for the children between fork() and exec: closes every descriptor
// from `first` up, with close_range() where the kernel has it (Linux 5.9), else one by
// one up to the descriptor limit.
void close_from(int first) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0) return;
#endif
  rlimit limit{};
  rlim_t most = 65536;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    most = std::min<rlim_t>(limit.rlim_cur, rlim_t{1} << 20);
  }
  for (rlim_t fd = static_cast<rlim_t>(first); fd < most; ++fd) ::close(static_cast<int>(fd));
}

// The guard, in the child between fork() and exec (async-signal-safe calls only). It leads
// a new process group, which the engine joins. It keeps only the read end of the lifeline
// (on its stdin; /dev/null on stdout and stderr), so the write ends are all in kvfuzz and
// their end of file means that kvfuzz is gone, however it went. It ignores every signal
// that can be ignored: an engine's "kill 0" (a shell script's cleanup trap) must not
// remove the guard while the engine lives; kvfuzz's SIGKILL to the group ends it. It
// runs /bin/sh rather than staying a copy of kvfuzz: a process that small is no candidate
// for the OOM killer, which weighs the pages a forked copy shares with kvfuzz.
[[noreturn]] void run_guard(const char* const* argv, int lifeline) {
  setpgid(0, 0);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int number = 1; number < NSIG; ++number) {
    if (number != SIGKILL && number != SIGSTOP && number != SIGCHLD) {
      sigaction(number, &ignore, nullptr);
    }
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (lifeline == STDIN_FILENO) {
    fcntl(lifeline, F_SETFD, 0);  // kept across exec
  } else if (dup2(lifeline, STDIN_FILENO) < 0) {
    kill(0, SIGKILL);  // cannot guard: take the group down now rather than guard nothing
    _exit(127);
  }
  close_from(1);
  open("/dev/null", O_RDWR);  // 1
  open("/dev/null", O_RDWR);  // 2
  execv("/bin/sh", const_cast<char* const*>(argv));
  // No shell: the same loop here.
  char byte;
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, &byte, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  kill(0, SIGKILL);
  _exit(127);
}

// The engine, in the child between fork() and exec (async-signal-safe calls only). The
// pipe ends are first moved above 2 (so that one already at 0, 1 or 2 is not overwritten
// by another's dup2), then onto 0, 1 and 2; every other descriptor is closed, those that
// kvfuzz (or whoever embeds it) opened without O_CLOEXEC included, so the engine holds no
// other engine's pipe (which would keep it from ever seeing end of file) and no lifeline.
// Then it joins the guard's process group, before it can start anything.
//
// No PR_SET_PDEATHSIG: the guard covers kvfuzz's death, and the death signal would fire
// when the thread that forked ends, not the process, and reach only the shell (dash forks
// a command instead of replacing itself with it), not the engine.
[[noreturn]] void exec_shell(const char* const* argv, int in, int out, int err, pid_t group) {
  const int high_in = fcntl(in, F_DUPFD_CLOEXEC, 3);
  const int high_out = fcntl(out, F_DUPFD_CLOEXEC, 3);
  const int high_err = fcntl(err, F_DUPFD_CLOEXEC, 3);
  if (high_in < 0 || high_out < 0 || high_err < 0) _exit(127);
  if (dup2(high_in, STDIN_FILENO) < 0 || dup2(high_out, STDOUT_FILENO) < 0 ||
      dup2(high_err, STDERR_FILENO) < 0) {
    _exit(127);
  }
  close_from(3);
  if (setpgid(0, group) != 0) {
    // The guard is gone (killed from outside): no group to be killed with.
    static const char message[] = "kvfuzz: the engine's guard process is gone\n";
    [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
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
  start_guard();
  try {
    start_engine(command);
  } catch (...) {
    kill_group_and_reap();
    close_fds();
    throw;
  }
}

// The guard leads the engine's process group and holds the read end of the lifeline, a
// pipe whose write end only kvfuzz holds (O_CLOEXEC, and closed in every child before it
// runs anything). When kvfuzz ends, normally or killed by any signal, the kernel closes
// it; the guard reads end of file and sends SIGKILL to the group: the engine, whatever
// it started, and the guard. While kvfuzz lives, the guard is an unreaped child of
// kvfuzz, so the group's id cannot be reused by another process, which makes kvfuzz's own
// kill of the group safe too.
void LineProcess::start_guard() {
  std::array<int, 2> lifeline{-1, -1};
  if (pipe2(lifeline.data(), O_CLOEXEC) != 0) {
    throw EngineError("cannot start the engine: pipe: " + errno_text(errno));
  }
  // Prepared before fork(): the child may not allocate.
  const char* const argv[] = {"kvfuzz-engine-guard", "-c", kGuardScript, nullptr};
  guard_pid_ = fork();
  if (guard_pid_ < 0) {
    const int error = errno;
    close_fd(lifeline[0]);
    close_fd(lifeline[1]);
    throw EngineError("cannot start the engine: fork: " + errno_text(error));
  }
  if (guard_pid_ == 0) run_guard(argv, lifeline[0]);
  setpgid(guard_pid_, guard_pid_);  // here too, so that the group exists before the engine
  close_fd(lifeline[0]);
  lifeline_ = lifeline[1];
}

void LineProcess::start_engine(const std::string& command) {
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
  pid_ = fork();
  if (pid_ < 0) {
    const int error = errno;
    close_pipes();
    throw EngineError("cannot start the engine: fork: " + errno_text(error));
  }
  if (pid_ == 0) exec_shell(argv, in[0], out[1], err[1], guard_pid_);
  setpgid(pid_, guard_pid_);  // here too; fails harmlessly once the child has exec'd
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
    fail("the engine wrote a line nobody asked for before " + name + ": " +
         quote_excerpt(std::string_view(reply_).substr(0, reply_.find('\n'))));
  }
  std::string data(request);
  data += '\n';
  size_t written = 0;
  bool stdin_closed = false;  // then its answer (or how it ended) may still be on stdout
  const Clock::time_point deadline = Clock::now() + timeout_;
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
  failure_ = message + kill_group_and_reap();
  close_fds();
  throw EngineError(*failure_);
}

std::string LineProcess::kill_group_and_reap() {
  if (ended_) return "";
  ended_ = true;
  // The group (the guard's) reaches the engine and whatever it started. Its id is safe to
  // signal while the guard, or the engine inside the group, is an unreaped child: a
  // group's id is not reused while a process, even a zombie, is in it. The engine's pid
  // likewise. A child already reaped (only possible when SIGCHLD is ignored, which makes
  // the kernel reap them) is not signalled: its id may be another process's now. (With
  // SIGCHLD ignored a child found unreaped could still exit and be reaped before kill()
  // below; its id would then have to be handed out again within those microseconds.)
  const bool guard_held = unreaped_child(guard_pid_);
  const bool engine_held = unreaped_child(pid_);
  if (guard_held || (engine_held && getpgid(pid_) == guard_pid_)) kill(-guard_pid_, SIGKILL);
  if (engine_held) kill(pid_, SIGKILL);
  const Clock::time_point deadline = Clock::now() + kReapGrace;
  std::string left;
  for (const auto& [pid, what] :
       {std::pair{pid_, "the engine"}, std::pair{guard_pid_, "its guard"}}) {
    if (!reap(pid, deadline)) {
      left += "; " + std::string(what) + " (pid " + std::to_string(pid) + ") was still there " +
              describe_seconds(kReapGrace) + " after SIGKILL and is left behind";
    }
  }
  return left;
}

void LineProcess::close() {
  if (!ended_ && pid_ > 0) {
    close_fd(stdin_);  // end of file: a well-behaved engine exits now
    const Clock::time_point deadline = Clock::now() + kExitGrace;
    while (!has_exited() && Clock::now() < deadline) {
      // Its output is read and dropped meanwhile, so that it cannot block on a full pipe.
      const std::chrono::milliseconds slice(poll_wait(deadline, std::chrono::milliseconds(50)));
      if (!pump(slice)) poll(nullptr, 0, 1);
      reply_.clear();
      scanned_ = 0;
    }
  }
  const std::string left = kill_group_and_reap();
  // A destructor has no one to tell but the user.
  if (!left.empty()) std::fprintf(stderr, "kvfuzz: ending an exec: engine%s\n", left.c_str());
  close_fds();
}

void LineProcess::close_fds() {
  close_fd(stdin_);
  close_fd(stdout_);
  close_fd(stderr_fd_);
  close_fd(lifeline_);  // after the kill: a guard still alive would kill the group itself
}

}  // namespace kvfuzz::external
