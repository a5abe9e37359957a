// Running the built kvfuzz command from a test, as a user would: exit status, stdout and
// stderr. KVFUZZ_BINARY is defined by tests/CMakeLists.txt for the tests that use it.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kvfuzz::test {

struct CommandResult {
  int status = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a shell command line; stdout through a pipe, stderr through a temporary file.
inline CommandResult run_shell(const std::string& command_line) {
  static int calls = 0;
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() /
      ("kvfuzz-test-" + std::to_string(::getpid()) + "-" + std::to_string(++calls) + ".err");
  const std::string command = command_line + " 2>" + err_file.string();
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  result.err = slurp(err_file);
  std::filesystem::remove(err_file);
  return result;
}

inline CommandResult run_kvfuzz(const std::string& args) {
  return run_shell(std::string(KVFUZZ_BINARY) + " " + args);
}

}  // namespace kvfuzz::test
