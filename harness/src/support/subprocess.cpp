#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace kvfuzz {

namespace {

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

ProcessResult decode_status(int status) {
  ProcessResult result;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env) {
  if (argv.empty()) throw std::runtime_error("no program to run");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe
  // calls are allowed.
  std::vector<std::string> args = argv;
  std::vector<std::string> environment = merged_environment(env);
  std::vector<char*> arg_pointers = pointers(args);
  std::vector<char*> env_pointers = pointers(environment);
  pid_ = fork();
  if (pid_ < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphaned fuzzer if the campaign is killed
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execvpe(arg_pointers[0], arg_pointers.data(), env_pointers.data());
    const char message[] = "kvfuzz: could not start the program\n";
    [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
    _exit(127);
  }
  setpgid(pid_, pid_);  // also here, so that stop() works even before the child ran
  close(fds[1]);
  fd_ = fds[0];
}

Subprocess::~Subprocess() {
  if (!result_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) close(fd_);
}

bool Subprocess::poll_lines(std::chrono::milliseconds wait,
                            const std::function<void(const std::string&)>& on_line) {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(wait.count()));
  if (ready < 0 && errno == EINTR) return true;
  if (ready <= 0) return true;
  char buffer[4096];
  const ssize_t n = read(fd_, buffer, sizeof buffer);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    if (!pending_.empty()) on_line(pending_);
    pending_.clear();
    close(fd_);
    fd_ = -1;
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
  if (result_ || pid_ <= 0) return;
  kill(-pid_, SIGINT);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      result_ = decode_status(status);
      kill(-pid_, SIGKILL);  // whatever of the group is left
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid_, SIGKILL);
}

void Subprocess::interrupt() {
  if (!result_ && pid_ > 0) kill(pid_, SIGINT);
}

ProcessResult Subprocess::wait() {
  if (!result_) {
    int status = 0;
    pid_t reaped = -1;
    while ((reaped = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    // Not ours to reap (SIGCHLD ignored by whoever started us): unknown, never "exit 0".
    result_ = reaped == pid_ ? decode_status(status) : ProcessResult{};
  }
  return *result_;
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
