// The transport of the exec: engine protocol (docs/engine-protocol.md): a child process
// that answers every line written to its stdin with one line on its stdout. It knows
// nothing of JSON; what it guarantees is that kvfuzz never hangs and never dies, whatever
// the engine does, and that the engine's process group does not outlive the engine object
// or kvfuzz:
//
//  * every exchange has a deadline (poll(), never a blocking read or write); a late engine
//    is killed;
//  * stdout and stderr are read while the request is being written, so an engine that
//    writes a lot never blocks on a full pipe while kvfuzz blocks on its full stdin;
//  * writing to an engine that has exited gives EPIPE here, never SIGPIPE to kvfuzz;
//  * the engine is a GuardedProcess (support/process.h): a process group of its own, led
//    by a guard that kills the group when kvfuzz ends in any way, SIGKILL included. On
//    destruction the engine gets EOF on stdin, a short grace to exit, then SIGKILL for
//    the whole group; the engine and the guard are reaped (waiting at most
//    GuardedProcess::kReapGrace for a process that does not die of SIGKILL, which is
//    then left behind and said so);
//  * the engine inherits no descriptor of kvfuzz's but its stdin, stdout and stderr.
//
// What it cannot reach: a process the engine started in a process group or session of its
// own (setsid, setpgid) escapes both kills.
//
// Failures throw EngineError with one line naming the request and what happened (the exit
// status or signal, and the last stderr lines); a request not answered in time throws its
// subclass EngineTimeout. After a failure the process is gone and
// every later exchange throws the same message.
//
// Across fork(): the process belongs to the kvfuzz process that started it. A forked
// child that holds a copy of the object (a worker forked with an engine pool) may destroy
// it, which only closes the child's copies of the pipes: the engine is not a child of the
// child's, so GuardedProcess neither signals nor waits for it, and the parent keeps using
// it. usable() is false there and exchange() refuses, so the child never writes to the
// parent's engine.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "doors/exec_stderr_tail.h"
#include "kvfuzz/engine.h"
#include "support/process.h"

namespace kvfuzz::doors {

// The engine did not answer a request within its time limit (KVFUZZ_ENGINE_TIMEOUT) and was
// killed: it hung. The exec adapter counts these (EngineInfo::hangs), so that a case ends at
// its engine's first hang instead of waiting out one more per property (CaseJudge).
struct EngineTimeout : EngineError {
  using EngineError::EngineError;
};

class LineProcess {
 public:
  // Starts the guard, then `/bin/sh -c command` in the guard's process group. `timeout`
  // bounds each exchange. Throws EngineError when no process can be started (pipes or
  // fork failing); a command that does not exist starts (the shell) and fails at the
  // first exchange with the shell's own message.
  LineProcess(const std::string& command, std::chrono::milliseconds timeout);
  ~LineProcess();
  LineProcess(const LineProcess&) = delete;
  LineProcess& operator=(const LineProcess&) = delete;

  // Writes `request` and a newline, returns the next line of stdout without its newline
  // (and without a '\r' before it). `what` names the request in messages ("step").
  // `max_reply_bytes` bounds the line, so an engine that writes without end cannot make
  // kvfuzz allocate without end. `timeout` replaces the process's for this exchange (a
  // start-up's hello). Throws EngineError.
  std::string exchange(std::string_view request, std::string_view what, size_t max_reply_bytes,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // Ends the process (the destructor does this): EOF on stdin, up to kExitGrace for it to
  // exit, then SIGKILL to its group; reaps it and the guard. Never throws; a process that
  // outlives GuardedProcess::kReapGrace after SIGKILL is reported on stderr.
  void close();

  // True while the process can take another exchange: no exchange has failed, it has not
  // exited (looking at it now, and reading what it wrote meanwhile) and it belongs to this
  // kvfuzz process (not one inherited across fork()). Output nobody asked for makes it
  // unusable too: its next exchange would fail.
  bool usable();

  static constexpr std::chrono::milliseconds kExitGrace{1000};

 private:
  // Kills the process and throws: EngineTimeout when `hung`, else EngineError.
  [[noreturn]] void fail(const std::string& message, bool hung = false);
  [[noreturn]] void fail_ended(std::string_view what, std::string_view how);
  bool write_some(std::string_view data, size_t& written);
  void read_stdout();
  void read_stderr();
  // Waits up to `wait` for output on stdout or stderr and reads it; false when both are
  // closed (then it returns at once).
  bool pump(std::chrono::milliseconds wait);
  std::string describe_exit() const;
  std::string stderr_suffix() const;

  std::chrono::milliseconds timeout_;
  GuardedProcess process_;  // the engine's shell, in its guarded process group
  std::string reply_;       // stdout read but not yet returned
  size_t scanned_ = 0;      // reply_'s first bytes known to hold no newline
  StderrTail stderr_;
  std::optional<std::string> failure_;
  pid_t owner_;  // the kvfuzz process that started it
};

}  // namespace kvfuzz::doors
