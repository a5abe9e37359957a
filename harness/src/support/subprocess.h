// Running another program (a fuzz target, kvfuzz itself) and reading its output line by
// line without ever blocking on it: a campaign must keep printing progress, honour a stop
// request and survive a child that hangs or dies. The child is a GuardedProcess
// (support/process.h): nothing it starts outlives it or kvfuzz. POSIX only.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "support/process.h"

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
  // this process's environment, stdin on /dev/null, stdout and stderr on one pipe. Throws
  // ProcessError (a std::runtime_error).
  Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~Subprocess();  // kills the group if still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Waits up to `wait` for output and calls `on_line` for each complete line. Returns
  // false once the output is drained (the child, and whatever it started, closed it).
  bool poll_lines(std::chrono::milliseconds wait,
                  const std::function<void(const std::string&)>& on_line);
  // SIGINT to the group (libFuzzer then finishes its current work and exits), then SIGKILL
  // to the group, at once when the child has exited or after `grace`; reaps it.
  void stop(std::chrono::milliseconds grace);
  // SIGINT to the child alone (what Ctrl-C in a terminal would send to a program).
  void interrupt();
  // Waits for the child to exit (after poll_lines returned false, or stop()), then kills
  // what is left of its group and reaps it.
  ProcessResult wait();

 private:
  GuardedProcess process_;
  std::string pending_;
};

// Runs to completion with a time limit, capturing the output. When `stop` becomes true
// (a campaign's Ctrl-C) the child is stopped as at the limit.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds limit, const std::atomic<bool>* stop = nullptr);

}  // namespace kvfuzz
