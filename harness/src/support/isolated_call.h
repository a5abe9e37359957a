// One piece of engine work (a replay, an explanation, a shrink candidate's judgement) run in
// a forked child, so that a crash, an abort, a sanitizer's exit or a hang of the engine
// ends the child and becomes a line, not the end of the command that asked. The answer is
// a string the child's work returns; it crosses a pipe. POSIX only.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace kvfuzz {

// How a child ended without an answer.
struct IsolatedEnd {
  // "crash/SIGSEGV", "exit/3", "asan/heap-buffer-overflow" (sanitizer_signature),
  // "timeout": as kvfuzz check's findings name them.
  std::string signature;
  // "died of SIGSEGV", "exited with status 3", "was stopped by its sanitizer (asan/...)",
  // "was still running after 2 s (now killed)": to follow "the engine".
  std::string how;
  std::string stderr_tail;  // the child's last stderr (a sanitizer's report, a stack)
};

struct IsolatedAnswer {
  std::optional<std::string> answer;  // what `work` returned
  std::optional<IsolatedEnd> ended;   // set when there is no answer
};

// Runs `work` in a child forked from this process, at most `timeout`, and returns its
// string or how the child ended. An exception escaping `work` ends the child like an exit
// (status 70, its what() on the child's stderr). The child's stdout goes to its stderr, which
// is kept in a file and copied to this process's stderr when the child answers (what an
// engine printed is not lost), or returned as stderr_tail when it does not. Throws
// std::runtime_error when no child can be started.
IsolatedAnswer call_isolated(const std::function<std::string()>& work,
                             std::chrono::milliseconds timeout);

// "the engine died of SIGSEGV" + the stderr tail's last lines, indented: what a command
// prints for an engine call that ended its child.
std::string describe_end(const IsolatedEnd& end, const std::string& doing);

}  // namespace kvfuzz
