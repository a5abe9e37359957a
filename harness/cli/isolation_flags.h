// --timeout and --no-fork, taken by every command that runs engines (replay, explain,
// shrink, check): engine calls run in a forked child (kvfuzz/orchestrate.h, Isolation), so
// that a crash, a sanitizer's exit or a hang of an engine is a line about that engine, not
// the end of the command; --no-fork runs them in kvfuzz itself, for a debugger.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/orchestrate.h"

namespace kvfuzz::cli {

// An engine crashed, exited or hung while it was made and asked for its declarations: the
// command cannot start. Neither a finding (1: there is no case, fixture or seed) nor bad
// input (2: the command line is fine, the engine is not), so CI can tell it apart.
constexpr int kExitCannotStart = 3;

struct IsolationFlags {
  // Seconds per engine call in its child. Long enough for a long-context case judged by all
  // six properties on a slow machine: only a real hang should reach it.
  double timeout = 600;
  bool no_fork = false;

  // Throws UsageError for a --timeout outside (0, 86400].
  Isolation isolation() const;
};

// Registers --timeout and --no-fork with this command's help for each.
void add_isolation_options(CLI::App& cmd, IsolationFlags& flags, const std::string& timeout_help,
                           const std::string& no_fork_help);

// What `engine` declares, asked in a child under `flags` (probe_declarations_isolated).
// Throws UsageError for an engine that says it cannot be made (EngineError), ProbeCrash
// when it crashes or hangs (the caller prints it and exits with kExitCannotStart).
EngineDeclarations declarations_of(const EngineInfo& engine, const IsolationFlags& flags);

}  // namespace kvfuzz::cli
