#include "support/subprocess.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace kvfuzz {

namespace {

ProcessSpec spec_for(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env) {
  if (argv.empty()) throw ProcessError("no program to run");
  ProcessSpec spec;
  spec.program = argv[0];
  spec.argv = argv;
  spec.env = env;
  spec.stderr_to_stdout = true;
  spec.name = argv[0];
  return spec;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env)
    : process_(spec_for(argv, env)) {}

Subprocess::~Subprocess() = default;

bool Subprocess::poll_lines(std::chrono::milliseconds wait,
                            const std::function<void(const std::string&)>& on_line) {
  const int fd = process_.stdout_fd();
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(wait.count()));
  if (ready <= 0) return true;  // nothing yet, or a signal (EINTR)
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!pending_.empty()) on_line(pending_);
    pending_.clear();
    process_.close_stdout();
    return false;
  }
  pending_.append(buffer, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t end; (end = pending_.find('\n', start)) != std::string::npos; start = end + 1) {
    on_line(pending_.substr(start, end - start));
  }
  pending_.erase(0, start);
  return true;
}

void Subprocess::stop(std::chrono::milliseconds grace) {
  if (process_.ended()) return;
  process_.signal_group(SIGINT);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!process_.has_exited() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  process_.end();  // SIGKILL to whatever of the group is left
}

void Subprocess::interrupt() {
  process_.signal_child(SIGINT);
}

ProcessResult Subprocess::wait() {
  if (!process_.ended()) {
    process_.wait_exit();
    process_.end();
  }
  ProcessResult result;
  // Not ours to reap (SIGCHLD ignored by whoever started us): unknown, never "exit 0".
  const std::optional<ProcessExit>& exit = process_.exit();
  if (exit && exit->known) {
    if (exit->signaled) {
      result.signal = exit->code;
    } else {
      result.exit_code = exit->code;
    }
  }
  return result;
}

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds limit, const std::atomic<bool>* stop) {
  Subprocess process(argv, env);
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  while (process.poll_lines(std::chrono::milliseconds(100),
                            [&](const std::string& line) { output += line + "\n"; })) {
    if (std::chrono::steady_clock::now() > deadline || (stop != nullptr && *stop)) {
      timed_out = true;
      process.stop(std::chrono::seconds(2));
      break;
    }
  }
  ProcessResult result = process.wait();
  result.timed_out = timed_out;
  result.output = std::move(output);
  return result;
}

}  // namespace kvfuzz
