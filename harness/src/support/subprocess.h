// Running another program (a fuzz target, kvfuzz itself) and reading its output line by
// line without ever blocking on it: a campaign must keep printing progress, honour a stop
// request and survive a child that hangs or dies. POSIX only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvfuzz {

struct ProcessResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  std::string output;  // stdout and stderr together, when captured
};

class Subprocess {
 public:
  // Starts `argv` (argv[0] is looked up on PATH when it has no '/') with `env` added to
  // this process's environment, stdout and stderr on one pipe, in its own process group
  // so that stop() reaches the children it starts too, and killed if this process dies.
  // Throws std::runtime_error.
  Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~Subprocess();  // kills the group if still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Waits up to `wait` for output and calls `on_line` for each complete line. Returns
  // false once the child has exited and its output is drained.
  bool poll_lines(std::chrono::milliseconds wait,
                  const std::function<void(const std::string&)>& on_line);
  // SIGINT to the group (libFuzzer then finishes its current work and exits), then SIGKILL
  // if it is still there after `grace`.
  void stop(std::chrono::milliseconds grace);
  // SIGINT to the child alone (what Ctrl-C in a terminal would send to a program).
  void interrupt();
  ProcessResult wait();  // reaps it (after poll_lines returned false, or stop())

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_;
  std::optional<ProcessResult> result_;
};

// Runs to completion with a time limit, capturing the output. When `stop` becomes true
// (a campaign's Ctrl-C) the child is stopped as at the limit.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds limit, const std::atomic<bool>* stop = nullptr);

}  // namespace kvfuzz
