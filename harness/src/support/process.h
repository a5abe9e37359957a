// A child process that cannot outlive kvfuzz and that kvfuzz never hangs on ending. Both
// kinds of child kvfuzz starts use it: the exec: door's engines (doors/exec_process.h) and
// a campaign's fuzz targets and shrinks (support/subprocess.h). POSIX only.
//
//  * The child runs in a process group of its own, led by a small guard process (a
//    /bin/sh waiting on a pipe, the lifeline, whose write end only kvfuzz holds): when
//    kvfuzz ends in any way, SIGKILL included, the kernel closes the pipe and the guard
//    kills the group, whatever the child started included.
//  * Ending it is SIGKILL to the whole group, then reaping the child and the guard,
//    waiting at most kReapGrace for a process that does not die of SIGKILL (it is then
//    left behind, and said so).
//  * The child inherits no descriptor of kvfuzz's but its stdin, stdout and stderr, and
//    starts with the default SIGPIPE action and no signal blocked.
//
// No PR_SET_PDEATHSIG: the guard covers kvfuzz's death, and the death signal would fire
// when the thread that forked ends, not the process, and reach only the child itself (a
// shell forks its command instead of replacing itself with it), not what it started.
//
// What it cannot reach: a process the child started in a process group or session of its
// own (setsid, setpgid) escapes both kills.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvfuzz {

// No process could be started (pipes or fork failing): "pipe: ..." or "fork: ...".
struct ProcessError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ProcessSpec {
  std::string program;                     // run as it is, or looked up on PATH when it has no '/'
  std::vector<std::string> argv;           // argv[0] included
  std::map<std::string, std::string> env;  // added to (or replacing in) kvfuzz's environment
  bool stdin_pipe = false;                 // a pipe kvfuzz writes to; else /dev/null
  bool stderr_to_stdout = false;           // stderr on the stdout pipe; else a pipe of its own
  std::string name = "the process";        // in messages: "the engine", "the program"
};

// How the child ended, from waitid() before reaping it.
struct ProcessExit {
  bool known = true;  // false when someone else reaped it (SIGCHLD ignored)
  bool signaled = false;
  int code = 0;  // the exit status, or the signal
};

class GuardedProcess {
 public:
  // Starts the guard, then the child in the guard's process group. Throws ProcessError. A
  // program that cannot be executed starts all the same and exits with status 127 after
  // "kvfuzz: cannot run PROGRAM" on its stderr.
  explicit GuardedProcess(const ProcessSpec& spec);
  ~GuardedProcess();  // end()
  GuardedProcess(const GuardedProcess&) = delete;
  GuardedProcess& operator=(const GuardedProcess&) = delete;

  // kvfuzz's ends of the pipes, non-blocking (the child's ends are ordinary blocking
  // pipes); -1 once closed, or when the spec asked for none.
  int stdin_fd() const { return stdin_; }
  int stdout_fd() const { return stdout_; }
  int stderr_fd() const { return stderr_; }
  void close_stdin();
  void close_stdout();
  void close_stderr();

  // True once the child has ended; it is not reaped yet (unless SIGCHLD is ignored), so
  // its pid cannot be reused before kill_and_reap() sends it its SIGKILL.
  bool has_exited();
  // Blocks until the child has ended (not reaping it either).
  void wait_exit();
  // How it ended, once has_exited(), wait_exit() or kill_and_reap() saw it.
  const std::optional<ProcessExit>& exit() const { return exit_; }

  // `signal` to the child alone, or to its whole group (the guard ignores it); nothing
  // once it is reaped.
  void signal_child(int signal);
  void signal_group(int signal);

  // SIGKILL to the group (and the child), then reaps the child and the guard. Returns ""
  // or, when one of them outlived kReapGrace, a clause saying so ("; NAME (pid N) was
  // still there ..."). Once done, does nothing more and returns "".
  std::string kill_and_reap();
  // kill_and_reap(), telling stderr what was left behind.
  void end();
  bool ended() const { return ended_; }

  void close_pipes();

  // How long a process sent SIGKILL may take to be gone. Normally microseconds; one in
  // uninterruptible sleep (a hung network file system, a GPU driver tearing down a large
  // context) dies only when that ends. kvfuzz does not hang on it: after this long it
  // stops waiting and leaves the process (it becomes a zombie of kvfuzz when it dies).
  static constexpr std::chrono::milliseconds kReapGrace{10'000};

 private:
  void start_guard();
  void start_child(const ProcessSpec& spec);

  std::string name_;
  pid_t pid_ = -1;        // the child
  pid_t guard_pid_ = -1;  // the guard, leader of the child's process group
  bool ended_ = false;    // killed and reaped (or left behind): nothing more to do
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
  int lifeline_ = -1;  // the write end of the guard's pipe: open while kvfuzz lives
  std::optional<ProcessExit> exit_;
};

}  // namespace kvfuzz
