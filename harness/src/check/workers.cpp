#include "check/workers.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "support/fork_io.h"

namespace kvfuzz::check {

namespace {

using Clock = std::chrono::steady_clock;

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error("kvfuzz check: " + what + ": " + std::strerror(errno));
}

struct TaskMessage {
  int32_t case_index;
  uint32_t engine;
};

// What a worker sends kvfuzz: frames of a uint32 size, then that many bytes, a kind byte
// and what it carries. kJudging: a property is about to be judged; its kProperties index
// (one byte), then the task's encoded TaskResult so far (the verdicts before it). kResult:
// the task's encoded TaskResult, which ends the task.
constexpr char kJudging = 'J';
constexpr char kResult = 'R';

bool send_frame(int fd, char kind, const std::string& payload) {
  const uint32_t size = static_cast<uint32_t>(payload.size() + 1);
  return write_all(fd, &size, sizeof size) && write_all(fd, &kind, 1) &&
         write_all(fd, payload.data(), payload.size());
}

}  // namespace

[[noreturn]] void worker_main(const CheckPlan& plan, int tasks, int results) {
  CaseCache cache;
  TaskMessage message{};
  // Told before each property, so that a crash or a hang in it says which it was under
  // and the verdicts reached before it are not lost with the worker.
  const auto judging = [results](Property property, const TaskResult& so_far) {
    // Appended, not std::string(1, c) + encode(...): g++ 12 -O3's -Wrestrict false positive.
    std::string frame(1, static_cast<char>(property));
    frame += encode(so_far);
    send_frame(results, kJudging, frame);
  };
  while (read_all(tasks, &message, sizeof message)) {
    const TaskId task{message.case_index, message.engine};
    if (!send_frame(results, kResult, encode(judge_task(plan, task, cache, judging)))) break;
  }
  std::fflush(nullptr);
  ::_exit(0);  // not exit(): kvfuzz's static destructors and atexit handlers are not the worker's
}

WorkerPool::WorkerPool(const CheckPlan& plan, int workers) : plan_(plan) {
  // A worker gone since its last task makes the next write fail (EPIPE) instead of killing
  // kvfuzz; collect() then finds it ended and replaces it.
  std::signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < workers; ++i) workers_.push_back(start());
}

WorkerPool::~WorkerPool() {
  for (Worker& worker : workers_) stop(worker);
}

WorkerPool::Worker WorkerPool::start() {
  int tasks[2], results[2], errors[2];
  if (::pipe2(tasks, O_CLOEXEC) != 0) throw system_error("pipe");
  if (::pipe2(results, O_CLOEXEC) != 0) throw system_error("pipe");
  if (::pipe2(errors, O_CLOEXEC) != 0) throw system_error("pipe");
  std::fflush(nullptr);  // nothing buffered may be written twice, once by the worker
  const pid_t pid = ::fork();
  if (pid < 0) throw system_error("fork");
  if (pid == 0) {
    // Its own process group: a Ctrl-C at the terminal reaches kvfuzz, which ends the
    // workers itself. It dies with kvfuzz.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGPIPE, SIG_IGN);
    for (const Worker& other : workers_) {
      for (int fd : {other.tasks, other.results, other.errors}) {
        if (fd >= 0) ::close(fd);
      }
    }
    // stdout too: what an engine prints must not mix with kvfuzz's table.
    ::dup2(errors[1], STDOUT_FILENO);
    ::dup2(errors[1], STDERR_FILENO);
    ::close(tasks[1]);
    ::close(results[0]);
    ::close(errors[0]);
    ::close(errors[1]);
    worker_main(plan_, tasks[0], results[1]);
  }
  ::close(tasks[0]);
  ::close(results[1]);
  ::close(errors[1]);
  ::fcntl(results[0], F_SETFL, O_NONBLOCK);
  ::fcntl(errors[0], F_SETFL, O_NONBLOCK);
  Worker worker;
  worker.pid = pid;
  worker.tasks = tasks[1];
  worker.results = results[0];
  worker.errors = errors[0];
  return worker;
}

void WorkerPool::stop(Worker& worker) {
  if (worker.pid > 0) {
    ::kill(worker.pid, SIGKILL);
    int status = 0;
    while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
    worker.pid = -1;
  }
  for (int* fd : {&worker.tasks, &worker.results, &worker.errors}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

bool WorkerPool::has_idle() const {
  for (const Worker& worker : workers_) {
    if (!worker.task) return true;
  }
  return false;
}

void WorkerPool::dispatch(TaskId task) {
  for (Worker& worker : workers_) {
    if (worker.task) continue;
    const TaskMessage message{task.case_index, static_cast<uint32_t>(task.engine)};
    worker.task = task;
    worker.judging.reset();
    worker.so_far = TaskResult{};
    worker.deadline = Clock::now() + plan_.timeout;
    write_all(worker.tasks, &message, sizeof message);
    return;
  }
  throw std::logic_error("WorkerPool::dispatch without an idle worker");
}

std::vector<TaskId> WorkerPool::in_flight() const {
  std::vector<TaskId> tasks;
  for (const Worker& worker : workers_) {
    if (worker.task) tasks.push_back(*worker.task);
  }
  return tasks;
}

void WorkerPool::read_errors(Worker& worker) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(worker.errors, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::string_view data(buffer, static_cast<size_t>(n));
    worker.received += data.size();
    const size_t to_head = std::min(data.size(), kStderrHead - worker.head.size());
    worker.head.append(data.substr(0, to_head));
    worker.tail.append(data.substr(to_head));
    if (worker.tail.size() > kStderrTail) {
      worker.left_out += worker.tail.size() - kStderrTail;
      worker.tail.erase(0, worker.tail.size() - kStderrTail);
    }
  }
}

std::pair<TaskId, TaskResult> WorkerPool::replace(Worker& worker, bool timed_out) {
  const TaskId task = *worker.task;
  int status = 0;
  if (timed_out) ::kill(worker.pid, SIGKILL);
  while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
  }
  worker.pid = -1;
  // What it wrote last (a sanitizer's report, an engine's last words), a moment after its end.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < until) {
    pollfd p{worker.errors, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) break;
    const size_t before = worker.received;
    read_errors(worker);
    if (worker.received == before && (p.revents & POLLHUP)) break;
  }
  // Its stderr since its last task: the first and the last bytes, the middle counted.
  std::string stderr_text = worker.head;
  if (worker.left_out > 0) {
    if (!stderr_text.empty() && stderr_text.back() != '\n') stderr_text += '\n';
    stderr_text += "[... " + std::to_string(worker.left_out) + " bytes left out ...]\n";
  }
  stderr_text += worker.tail;
  TaskFailure failure;
  const double seconds = std::chrono::duration<double>(plan_.timeout).count();
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g", seconds);
  failure.judging = worker.judging;
  const std::string during = while_judging(worker.judging);
  if (timed_out) {
    failure.signature = "timeout";
    failure.line = std::string("timeout: the case took longer than ") + limit + " s (--timeout)" +
                   (during.empty() ? "" : "," + during) + "; the worker was killed";
  } else if (WIFSIGNALED(status)) {
    failure.signature = end_signature(status);
    failure.line = "crash: the worker died of " + signal_name(WTERMSIG(status)) + during;
  } else if (const auto sanitizer = sanitizer_signature(stderr_text)) {
    failure.signature = *sanitizer;
    // AddressSanitizer's SEGV reads as the crash it caught, in the same words as without it
    // (its report is in the stderr tail below).
    failure.line = *sanitizer == "crash/SIGSEGV"
                       ? "crash: the worker died of SIGSEGV" + during
                       : "sanitizer: the worker's sanitizer reported " +
                             failure.signature.substr(failure.signature.find('/') + 1) + during +
                             " and exited with status " + end_signature(status).substr(5);
  } else {
    failure.signature = end_signature(status);
    failure.line = "exit: the worker exited with status " + failure.signature.substr(5) +
                   " in the middle of the case" + (during.empty() ? "" : "," + during) +
                   " (exit() in the engine, or a report that did not reach its stderr)";
  }
  failure.report = failure.line + "\n";
  if (!stderr_text.empty()) {
    failure.report += "the worker's last stderr:\n" + stderr_text;
    if (stderr_text.back() != '\n') failure.report += "\n";
  }
  TaskResult result = worker.so_far;  // the verdicts it reached before it ended
  result.failure = failure;
  result.seconds = timed_out ? seconds : 0;
  stop(worker);
  worker = start();
  return {task, result};
}

std::vector<std::pair<TaskId, TaskResult>> WorkerPool::collect(std::chrono::milliseconds wait) {
  std::vector<std::pair<TaskId, TaskResult>> done;
  const auto now = Clock::now();
  auto until = now + wait;
  for (const Worker& worker : workers_) {
    if (worker.task && worker.deadline < until) until = worker.deadline;
  }
  std::vector<pollfd> fds;
  for (const Worker& worker : workers_) {
    fds.push_back({worker.results, POLLIN, 0});
    fds.push_back({worker.errors, POLLIN, 0});
  }
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(0, timeout)));
  if (ready < 0 && errno != EINTR) throw system_error("poll");
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& worker = workers_[i];
    read_errors(worker);
    bool ended = false;
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(worker.results, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) ended = true;
      if (n <= 0) break;
      worker.pending.append(buffer, static_cast<size_t>(n));
    }
    uint32_t size = 0;
    while (worker.pending.size() >= sizeof size) {
      std::memcpy(&size, worker.pending.data(), sizeof size);
      if (worker.pending.size() < sizeof size + size) break;
      const std::string frame = worker.pending.substr(sizeof size, size);
      worker.pending.erase(0, sizeof size + size);
      if (!worker.task || frame.empty()) continue;
      if (frame[0] == kJudging && frame.size() > 2 &&
          static_cast<size_t>(frame[1]) < kProperties.size()) {
        worker.judging = static_cast<Property>(frame[1]);
        worker.so_far = decode(frame.substr(2));
      } else if (frame[0] == kResult) {
        done.emplace_back(*worker.task, decode(frame.substr(1)));
        worker.task.reset();
        worker.head.clear();
        worker.tail.clear();
        worker.left_out = 0;
        worker.received = 0;
      } else {
        throw std::runtime_error("kvfuzz check: a worker sent a frame of unknown kind");
      }
    }
    if (ended && worker.task) {
      done.push_back(replace(worker, false));
    } else if (ended) {
      stop(worker);  // gone between tasks: started again for the next one
      worker = start();
    } else if (worker.task && Clock::now() >= worker.deadline) {
      done.push_back(replace(worker, true));
    }
  }
  return done;
}

}  // namespace kvfuzz::check
