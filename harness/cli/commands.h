// The kvfuzz subcommands. Each registers its options on the app and, when chosen, runs
// and stores its exit status in `exit_status`.
#pragma once

#include <CLI/CLI.hpp>

namespace kvfuzz::cli {

void add_replay_command(CLI::App& app, int& exit_status);
void add_explain_command(CLI::App& app, int& exit_status);
void add_list_command(CLI::App& app, int& exit_status);
void add_check_command(CLI::App& app, int& exit_status);
void add_shrink_command(CLI::App& app, int& exit_status);
void add_campaign_command(CLI::App& app, int& exit_status);

}  // namespace kvfuzz::cli
