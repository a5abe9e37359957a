#include "support/process.h"

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
#include <cstdio>
#include <cstring>
#include <utility>

#include "support/text.h"

extern char** environ;

namespace kvfuzz {

namespace {

using Clock = std::chrono::steady_clock;

// The guard's program (see GuardedProcess::start_guard): wait for end of file on stdin, the
// lifeline, then kill the process group it leads, itself included. Nothing ever writes to
// the lifeline, so `read` returns only at its end.
constexpr const char* kGuardScript = "while read -r line; do :; done; kill -KILL 0";

// kReapGrace in messages: "10 s".
static_assert(GuardedProcess::kReapGrace.count() % 1000 == 0, "whole seconds");
std::string reap_grace_text() {
  return std::to_string(GuardedProcess::kReapGrace.count() / 1000) + " s";
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void set_nonblocking(int fd) {
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// kvfuzz's environment with `extra` added, replacing variables of the same name.
std::vector<std::string> merged_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> result;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (!extra.count(name)) result.push_back(entry);
  }
  for (const auto& [name, value] : extra) result.push_back(name + "=" + value);
  return result;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
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

ProcessExit decode_status(int status) {
  if (WIFSIGNALED(status)) return ProcessExit{true, true, WTERMSIG(status)};
  return ProcessExit{true, false, WEXITSTATUS(status)};
}

// Reaps `pid`, a child of ours that was sent SIGKILL, waiting until `deadline` at most,
// and says how it ended in `exit`. False when it is still there then.
bool reap(pid_t pid, Clock::time_point deadline, ProcessExit& exit) {
  if (pid <= 0) return true;
  int pause_ms = 1;
  for (;;) {
    int status = 0;
    const pid_t reaped = waitpid(pid, &status, WNOHANG);
    if (reaped == pid) {
      exit = decode_status(status);
      return true;
    }
    if (reaped < 0 && errno != EINTR) {
      exit = ProcessExit{false, false, 0};  // ECHILD: reaped already (SIGCHLD ignored)
      return true;
    }
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
// a new process group, which the child joins. It keeps only the read end of the lifeline
// (on its stdin; /dev/null on stdout and stderr), so the write ends are all in kvfuzz and
// their end of file means that kvfuzz is gone, however it went. It ignores every signal
// that can be ignored: a child's "kill 0" (a shell script's cleanup trap), or kvfuzz's
// SIGINT to the group, must not remove the guard while the child lives; kvfuzz's SIGKILL
// to the group ends it. It runs /bin/sh rather than staying a copy of kvfuzz: a process
// that small is no candidate for the OOM killer, which weighs the pages a forked copy
// shares with kvfuzz.
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

// What the child needs between fork() and exec, prepared before fork(): after it, the
// child may not allocate.
struct ChildStart {
  const char* program;
  char* const* argv;
  char* const* envp;
  const std::string& no_guard;  // "kvfuzz: NAME's guard process is gone\n"
  const std::string& no_exec;   // "kvfuzz: cannot run PROGRAM\n"
};

void write_message(const std::string& message) {
  [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, message.data(), message.size());
}

// The child, between fork() and exec (async-signal-safe calls only). The pipe ends are
// first moved above 2 (so that one already at 0, 1 or 2 is not overwritten by another's
// dup2), then onto 0, 1 and 2; every other descriptor is closed, those that kvfuzz (or
// whoever embeds it) opened without O_CLOEXEC included, so the child holds no other
// child's pipe (which would keep it from ever seeing end of file) and no lifeline. Then
// it joins the guard's process group, before it can start anything.
[[noreturn]] void exec_child(const ChildStart& start, int in, int out, int err, pid_t group) {
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
    write_message(start.no_guard);
    _exit(127);
  }
  // A signal ignored or blocked here would stay so in the child: give it the defaults.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvpe(start.program, start.argv, start.envp);
  write_message(start.no_exec);
  _exit(127);
}

}  // namespace

GuardedProcess::GuardedProcess(const ProcessSpec& spec) : name_(spec.name) {
  if (spec.argv.empty()) throw ProcessError("no program to run");
  start_guard();
  try {
    start_child(spec);
  } catch (...) {
    kill_and_reap();
    close_pipes();
    throw;
  }
}

GuardedProcess::~GuardedProcess() {
  end();
  close_pipes();
}

void GuardedProcess::end() {
  const std::string left = kill_and_reap();
  // A destructor, or a stop, has no one to tell but the user.
  if (!left.empty()) std::fprintf(stderr, "kvfuzz: ending %s%s\n", name_.c_str(), left.c_str());
}

// The guard leads the child's process group and holds the read end of the lifeline, a
// pipe whose write end only kvfuzz holds (O_CLOEXEC, and closed in every child before it
// runs anything). When kvfuzz ends, normally or killed by any signal, the kernel closes
// it; the guard reads end of file and sends SIGKILL to the group: the child, whatever it
// started, and the guard. While kvfuzz lives, the guard is an unreaped child of kvfuzz,
// so the group's id cannot be reused by another process, which makes kvfuzz's own kill
// of the group safe too.
void GuardedProcess::start_guard() {
  std::array<int, 2> lifeline{-1, -1};
  if (pipe2(lifeline.data(), O_CLOEXEC) != 0) throw ProcessError("pipe: " + errno_text(errno));
  // Prepared before fork(): the child may not allocate.
  const char* const argv[] = {"kvfuzz-engine-guard", "-c", kGuardScript, nullptr};
  guard_pid_ = fork();
  if (guard_pid_ < 0) {
    const int error = errno;
    close_fd(lifeline[0]);
    close_fd(lifeline[1]);
    throw ProcessError("fork: " + errno_text(error));
  }
  if (guard_pid_ == 0) run_guard(argv, lifeline[0]);
  setpgid(guard_pid_, guard_pid_);  // here too, so that the group exists before the child
  close_fd(lifeline[0]);
  lifeline_ = lifeline[1];
}

void GuardedProcess::start_child(const ProcessSpec& spec) {
  std::array<int, 2> in{-1, -1}, out{-1, -1}, err{-1, -1};
  const auto close_pipe_ends = [&] {
    for (std::array<int, 2>* p : {&in, &out, &err}) {
      close_fd((*p)[0]);
      close_fd((*p)[1]);
    }
  };
  bool opened = spec.stdin_pipe ? pipe2(in.data(), O_CLOEXEC) == 0
                                : (in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;
  opened = opened && pipe2(out.data(), O_CLOEXEC) == 0;
  opened = opened && (spec.stderr_to_stdout || pipe2(err.data(), O_CLOEXEC) == 0);
  if (!opened) {
    const int error = errno;
    close_pipe_ends();
    throw ProcessError("pipe: " + errno_text(error));
  }
  // Prepared before fork(): the child may not allocate.
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> environment = merged_environment(spec.env);
  const std::vector<char*> arg_pointers = pointers(args);
  const std::vector<char*> env_pointers = pointers(environment);
  const std::string no_guard = "kvfuzz: " + name_ + "'s guard process is gone\n";
  const std::string no_exec = "kvfuzz: cannot run " + spec.program + "\n";
  const ChildStart start{spec.program.c_str(), arg_pointers.data(), env_pointers.data(), no_guard,
                         no_exec};
  const int child_err = spec.stderr_to_stdout ? out[1] : err[1];
  pid_ = fork();
  if (pid_ < 0) {
    const int error = errno;
    close_pipe_ends();
    throw ProcessError("fork: " + errno_text(error));
  }
  if (pid_ == 0) exec_child(start, in[0], out[1], child_err, guard_pid_);
  setpgid(pid_, guard_pid_);  // here too; fails harmlessly once the child has exec'd
  close_fd(in[0]);
  close_fd(out[1]);
  close_fd(err[1]);
  stdin_ = in[1];
  stdout_ = out[0];
  stderr_ = err[0];
  // Non-blocking on kvfuzz's side only: the child's ends stay ordinary blocking pipes.
  for (const int fd : {stdin_, stdout_, stderr_}) set_nonblocking(fd);
}

void GuardedProcess::close_stdin() {
  close_fd(stdin_);
}

void GuardedProcess::close_stdout() {
  close_fd(stdout_);
}

void GuardedProcess::close_stderr() {
  close_fd(stderr_);
}

void GuardedProcess::close_pipes() {
  close_fd(stdin_);
  close_fd(stdout_);
  close_fd(stderr_);
}

bool GuardedProcess::has_exited() {
  if (exit_) return true;
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != ECHILD) return false;
    exit_ = ProcessExit{false, false, 0};  // reaped behind our back: SIGCHLD is ignored
    return true;
  }
  if (info.si_pid == 0) return false;  // still running
  const bool signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  exit_ = ProcessExit{true, signaled, info.si_status};
  return true;
}

void GuardedProcess::wait_exit() {
  while (!exit_) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) == 0) {
      const bool signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
      exit_ = ProcessExit{true, signaled, info.si_status};
    } else if (errno != EINTR) {
      exit_ = ProcessExit{false, false, 0};  // reaped behind our back: SIGCHLD is ignored
    }
  }
}

void GuardedProcess::signal_child(int signal) {
  if (!ended_ && unreaped_child(pid_)) kill(pid_, signal);
}

void GuardedProcess::signal_group(int signal) {
  if (!ended_ && unreaped_child(guard_pid_)) kill(-guard_pid_, signal);
}

std::string GuardedProcess::kill_and_reap() {
  if (ended_) return "";
  ended_ = true;
  // The group (the guard's) reaches the child and whatever it started. Its id is safe to
  // signal while the guard, or the child inside the group, is an unreaped child: a
  // group's id is not reused while a process, even a zombie, is in it. The child's pid
  // likewise. A child already reaped (only possible when SIGCHLD is ignored, which makes
  // the kernel reap them) is not signalled: its id may be another process's now. (With
  // SIGCHLD ignored a child found unreaped could still exit and be reaped before kill()
  // below; its id would then have to be handed out again within those microseconds.)
  const bool guard_held = unreaped_child(guard_pid_);
  const bool child_held = unreaped_child(pid_);
  if (guard_held || (child_held && getpgid(pid_) == guard_pid_)) kill(-guard_pid_, SIGKILL);
  if (child_held) kill(pid_, SIGKILL);
  const Clock::time_point deadline = Clock::now() + kReapGrace;
  std::string left;
  const auto left_behind = [&](pid_t pid, const std::string& what) {
    left += "; " + what + " (pid " + std::to_string(pid) + ") was still there " +
            reap_grace_text() + " after SIGKILL and is left behind";
  };
  ProcessExit child_exit;
  if (!reap(pid_, deadline, child_exit)) {
    left_behind(pid_, name_);
  } else if (!exit_ && pid_ > 0) {
    exit_ = child_exit;  // it ended of this SIGKILL (or just before)
  }
  ProcessExit guard_exit;
  if (!reap(guard_pid_, deadline, guard_exit)) left_behind(guard_pid_, "its guard");
  close_fd(lifeline_);  // after the kill: a guard still alive would kill the group itself
  return left;
}

}  // namespace kvfuzz
