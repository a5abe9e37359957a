// The fork server of kvfuzz check: worker processes forked from kvfuzz once the engines are
// resolved (a plugin loaded, an exec engine's command checked), each judging many tasks
// sent over a pipe, so that what an engine keeps per process (a persistent exec process,
// a CUDA context) is made once per worker. A worker that crashes, exits or outlives the
// task's timeout is reaped (killed first when it hangs) and replaced, and its task gets a
// TaskFailure with the tail of the worker's stderr. POSIX only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "check/task.h"
#include "kvfuzz/check.h"

namespace kvfuzz::check {

class WorkerPool {
 public:
  WorkerPool(const CheckPlan& plan, int workers);  // throws std::runtime_error
  ~WorkerPool();                                   // kills and reaps every worker
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  bool has_idle() const;
  void dispatch(TaskId task);  // to an idle worker
  // Waits at most `wait` for results; returns the tasks that ended (crashes included).
  std::vector<std::pair<TaskId, TaskResult>> collect(std::chrono::milliseconds wait);
  std::vector<TaskId> in_flight() const;

  // How many bytes of a worker's stderr (since its last task ended) a failure keeps: the
  // first kStderrHead (where a crash handler's first words are, Python's faulthandler
  // "Fatal Python error: Segmentation fault"), and the last kStderrTail (where a
  // sanitizer's SUMMARY line is), the bytes between them counted.
  static constexpr size_t kStderrHead = 2000;
  static constexpr size_t kStderrTail = 4000;

 private:
  struct Worker {
    pid_t pid = -1;
    int tasks = -1;       // write end: tasks to the worker
    int results = -1;     // read end: length-prefixed results
    int errors = -1;      // read end: the worker's stderr and stdout
    std::string pending;  // result bytes read so far
    std::string head;     // the first kStderrHead bytes of its stderr since its last task
    std::string tail;     // then the last kStderrTail bytes
    size_t left_out = 0;  // between them
    size_t received = 0;  // every byte since its last task
    std::optional<TaskId> task;
    std::optional<Property> judging;  // what the worker said it is judging for `task`
    TaskResult so_far;                // and the verdicts it had reached before that
    std::chrono::steady_clock::time_point deadline;
  };

  Worker start();
  void stop(Worker& worker);  // SIGKILL, reap, close
  void read_errors(Worker& worker);
  // The worker ended or hung with a task in flight: the task's failure, and a new worker.
  std::pair<TaskId, TaskResult> replace(Worker& worker, bool timed_out);

  const CheckPlan& plan_;
  std::vector<Worker> workers_;
};

// What a worker does (also what the tests call to judge a task in a worker of their own):
// reads tasks from `tasks`, writes results to `results` until `tasks` closes.
[[noreturn]] void worker_main(const CheckPlan& plan, int tasks, int results);

}  // namespace kvfuzz::check
