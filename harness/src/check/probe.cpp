// probe_declarations_isolated (kvfuzz/check.h): an engine is made and asked for its
// declarations in a forked child, as its cases later are in workers, so that a plugin that
// crashes or hangs in its create, its declarations or its destroy is one line instead of
// kvfuzz dying with it before the first case. The answer crosses a pipe as JSON, every
// field of it (run/declarations_json.h).
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
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "check/fork_io.h"
#include "kvfuzz/check.h"
#include "run/declarations_json.h"

namespace kvfuzz {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

[[noreturn]] void child_main(const EngineInfo& engine, int answer) {
  // What an engine prints on stdout must not mix with kvfuzz's own output.
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  Json j;
  try {
    j["declarations"] = declarations_json(probe_declarations(engine));
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  // Replaced, not refused: an engine's message may hold bytes that are no UTF-8.
  const std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  const uint32_t size = static_cast<uint32_t>(text.size());
  check::write_all(answer, &size, sizeof size);
  check::write_all(answer, text.data(), text.size());
  std::fflush(nullptr);
  ::_exit(0);  // not exit(): kvfuzz's static destructors and atexit handlers are not the child's
}

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error("kvfuzz check: " + what + ": " + std::strerror(errno));
}

// Reaps `pid`, killing it first when it is still there at `deadline`. Returns its status.
int reap(pid_t pid, Clock::time_point deadline, bool& killed) {
  int status = 0;
  killed = false;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return status;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    }
    ::usleep(2000);
  }
}

// Everything written to `file` so far.
std::string read_all_of(std::FILE* file) {
  std::string text;
  std::rewind(file);
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  return text;
}

}  // namespace

EngineDeclarations probe_declarations_isolated(const EngineInfo& engine,
                                               std::chrono::milliseconds timeout) {
  if (engine.out_of_process) return probe_declarations(engine);
  int answer[2];
  if (::pipe2(answer, O_CLOEXEC) != 0) throw system_error("pipe");
  // The child's stderr goes to a file, not the terminal: a sanitizer's report of a crash is
  // read for its signature, and only kvfuzz's one line is shown. A file, not a pipe, so the
  // child can never block on it. Copied to kvfuzz's stderr when the probe succeeds.
  std::FILE* errors = std::tmpfile();
  if (errors == nullptr) {
    ::close(answer[0]);
    ::close(answer[1]);
    throw system_error("tmpfile");
  }
  std::fflush(nullptr);  // nothing buffered may be written twice, once by the child
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(answer[0]);
    ::close(answer[1]);
    std::fclose(errors);
    throw system_error("fork");
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // it dies with kvfuzz
    if (::getppid() != parent) ::_exit(1);
    ::close(answer[0]);
    ::dup2(::fileno(errors), STDERR_FILENO);
    child_main(engine, answer[1]);
  }
  ::close(answer[1]);
  // The answer, until it is whole, the child closes the pipe or the time is up.
  const auto deadline = Clock::now() + timeout;
  std::string pending;
  bool whole = false;
  while (!whole && Clock::now() < deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{answer[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::clamp<long>(left, 1, 100)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(answer[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed: the child ended
    pending.append(buffer, static_cast<size_t>(n));
    uint32_t size = 0;
    if (pending.size() >= sizeof size) {
      std::memcpy(&size, pending.data(), sizeof size);
      whole = pending.size() >= sizeof size + size;
    }
  }
  ::close(answer[0]);
  bool killed = false;
  // Once it answered, it only has to exit: a moment more, however little time is left.
  const int status = reap(
      pid, whole ? std::max(deadline, Clock::now() + std::chrono::seconds(1)) : deadline, killed);
  const std::string child_stderr = read_all_of(errors);
  std::fclose(errors);
  const std::string who = "engine '" + engine.name + "'";
  const std::string when = " while it was made and asked for its declarations (in a child process)";
  if (!whole) {
    if (killed) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", std::chrono::duration<double>(timeout).count());
      throw ProbeCrash(engine.name, "timeout",
                       who + " was still being made or asked for its declarations after " + limit +
                           " s (in a child process, now killed)");
    }
    const std::optional<std::string> sanitizer =
        WIFSIGNALED(status) ? std::nullopt : check::sanitizer_signature(child_stderr);
    const std::string signature = sanitizer ? *sanitizer : check::end_signature(status);
    std::string how;
    if (WIFSIGNALED(status)) {
      how = "died of " + check::signal_name(WTERMSIG(status));
    } else if (signature == "crash/SIGSEGV") {
      how = "died of SIGSEGV";  // caught and reported by AddressSanitizer, which then exited
    } else if (sanitizer) {
      how = "was stopped by its sanitizer (" + signature + ")";
    } else {
      how = "exited with status " + signature.substr(5);
    }
    throw ProbeCrash(engine.name, signature, who + " " + how + when);
  }
  std::fputs(child_stderr.c_str(), stderr);  // what the engine said while it was asked
  const auto undecodable = [&](const char* why) {
    return std::runtime_error("kvfuzz check: the declarations of " + who +
                              " do not decode: " + why);
  };
  Json j;
  try {
    j = Json::parse(pending.substr(sizeof(uint32_t)));
    if (j.contains("error")) throw EngineError(j.at("error").get<std::string>());
    return declarations_from_json(j.at("declarations"));
  } catch (const Json::exception& e) {
    throw undecodable(e.what());
  } catch (const std::invalid_argument& e) {
    throw undecodable(e.what());
  }
}

}  // namespace kvfuzz
