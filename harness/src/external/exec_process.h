// The transport of the exec: engine protocol (docs/engine-protocol.md): a child process
// that answers every line written to its stdin with one line on its stdout. It knows
// nothing of JSON; what it guarantees is that kvfuzz never hangs, never dies and never
// leaves a process behind, whatever the engine does:
//
//  * every exchange has a deadline (poll(), never a blocking read or write); a late engine
//    is killed;
//  * stdout and stderr are read while the request is being written, so an engine that
//    writes a lot never blocks on a full pipe while kvfuzz blocks on its full stdin;
//  * writing to an engine that has exited gives EPIPE here, never SIGPIPE to kvfuzz;
//  * the engine runs in its own process group, dies with kvfuzz (PR_SET_PDEATHSIG), and on
//    destruction gets EOF on stdin, a short grace to exit, then SIGKILL for the whole
//    group; it is always reaped.
//
// Failures throw EngineError with one line naming the request and what happened (the exit
// status or signal, and the last stderr lines). After a failure the process is gone and
// every later exchange throws the same message.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "exec_stderr_tail.h"

namespace kvfuzz::external {

class LineProcess {
 public:
  // Starts `/bin/sh -c command`. `timeout` bounds each exchange. Throws EngineError when
  // no process can be started (pipes or fork failing); a command that does not exist
  // starts (the shell) and fails at the first exchange with the shell's own message.
  LineProcess(const std::string& command, std::chrono::milliseconds timeout);
  ~LineProcess();
  LineProcess(const LineProcess&) = delete;
  LineProcess& operator=(const LineProcess&) = delete;

  // Writes `request` and a newline, returns the next line of stdout without its newline
  // (and without a '\r' before it). `what` names the request in messages ("step").
  // `max_reply_bytes` bounds the line, so an engine that writes without end cannot make
  // kvfuzz allocate without end. Throws EngineError.
  std::string exchange(std::string_view request, std::string_view what, size_t max_reply_bytes);

  // Ends the process (the destructor does this): EOF on stdin, up to kExitGrace for it to
  // exit, then SIGKILL to its group; reaps it. Never throws.
  void close();

  static constexpr std::chrono::milliseconds kExitGrace{1000};

 private:
  // How the process ended, from waitid() before reaping.
  struct Exit {
    bool known = true;  // false when someone else reaped it (SIGCHLD ignored)
    bool signaled = false;
    int code = 0;  // the exit status, or the signal
  };

  [[noreturn]] void fail(const std::string& message);
  [[noreturn]] void fail_ended(std::string_view what, std::string_view how);
  bool write_some(std::string_view data, size_t& written);
  void read_stdout();
  void read_stderr();
  // Waits up to `wait` for output on stdout or stderr and reads it; false when both are
  // closed (then it returns at once).
  bool pump(std::chrono::milliseconds wait);
  // True once the process has ended; it is not reaped yet, so its process group id cannot
  // be reused before kill_group_and_reap() sends the group its SIGKILL.
  bool has_exited();
  void kill_group_and_reap();
  std::string describe_exit() const;
  std::string stderr_suffix() const;
  void close_fds();

  pid_t pid_ = -1;
  bool reaped_ = false;
  int stdin_ = -1, stdout_ = -1, stderr_fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::string reply_;  // stdout read but not yet returned
  StderrTail stderr_;
  std::optional<Exit> exit_;
  std::optional<std::string> failure_;
};

}  // namespace kvfuzz::external
