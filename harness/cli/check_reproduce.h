// The command that re-runs one failing case of kvfuzz check: the command line as it was
// given, less what chooses cases or writes summaries (--cases, --seed, --jobs, --junit,
// --json, --max-failures, --case-seed), with --engine narrowed to the failing engine and
// --case-seed added. Whatever else shaped the generator (--max-tokens, --model, filters)
// is carried over as it was written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvfuzz::cli {

// This process's own arguments, argv[0] included (Linux: /proc/self/cmdline).
std::vector<std::string> own_command_line();

std::string reproduction_command(const std::vector<std::string>& argv, const std::string& engine,
                                 uint64_t case_seed);

}  // namespace kvfuzz::cli
