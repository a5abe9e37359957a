#include "isolation_flags.h"

#include <chrono>

#include "cli_support.h"
#include "kvfuzz/check.h"

namespace kvfuzz::cli {

Isolation IsolationFlags::isolation() const {
  if (!(timeout > 0) || timeout > 86'400) {
    throw UsageError("--timeout: expected a number of seconds in (0, 86400]");
  }
  return Isolation{.fork = !no_fork,
                   .timeout = std::chrono::milliseconds(static_cast<long>(timeout * 1000.0))};
}

void add_isolation_options(CLI::App& cmd, IsolationFlags& flags, const std::string& timeout_help,
                           const std::string& no_fork_help) {
  cmd.add_flag("--no-fork", flags.no_fork, no_fork_help);
  cmd.add_option("--timeout", flags.timeout, timeout_help)->default_val(flags.timeout);
}

EngineDeclarations declarations_of(const EngineInfo& engine, const IsolationFlags& flags) {
  try {
    const Isolation isolation = flags.isolation();
    return isolation.fork ? probe_declarations_isolated(engine, isolation.timeout)
                          : probe_declarations(engine);
  } catch (const EngineError& e) {
    throw UsageError(std::string("--engine: ") + e.what());
  }
}

}  // namespace kvfuzz::cli
