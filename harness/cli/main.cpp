// kvfuzz: checks that cached attention gives, for every query row, the same answer as
// recomputing the full prefix. See `kvfuzz --help` and docs/.
#include <cstdio>
#include <exception>
#include <string>

#include "cli_support.h"
#include "commands.h"
#include "isolation_flags.h"
#include "kvfuzz/check.h"
#include "kvfuzz/fixture_io.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvfuzz: cached attention must equal full-prefix attention at every absolute position.\n"
      "Exit status: 0 pass, 1 a mismatch was found, 2 bad input (fixture, flag or layout)."};
  app.set_version_flag("--version", KVFUZZ_VERSION);
  app.require_subcommand(1);
  int exit_status = kvfuzz::cli::kExitPass;
  kvfuzz::cli::add_replay_command(app, exit_status);
  kvfuzz::cli::add_explain_command(app, exit_status);
  kvfuzz::cli::add_list_command(app, exit_status);
  kvfuzz::cli::add_check_command(app, exit_status);
  kvfuzz::cli::add_shrink_command(app, exit_status);
  kvfuzz::cli::add_campaign_command(app, exit_status);
  try {
    // CLI11 would call an unknown command "a missing subcommand"; name it instead.
    if (argc > 1 && argv[1][0] != '-') {
      try {
        app.get_subcommand(argv[1]);
      } catch (const CLI::OptionNotFound&) {
        throw kvfuzz::cli::UsageError(
            std::string("unknown command '") + argv[1] +
            "'; expected one of replay, explain, list, check, shrink, campaign");
      }
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "kvfuzz: %s (see kvfuzz --help)\n", e.what());
    return kvfuzz::cli::kExitBadInput;
  } catch (const kvfuzz::FixtureError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kvfuzz::cli::kExitBadInput;
  } catch (const kvfuzz::cli::UsageError& e) {
    std::fprintf(stderr, "kvfuzz: %s\n", e.what());
    return kvfuzz::cli::kExitBadInput;
  } catch (const kvfuzz::ProbeCrash& e) {
    // An engine crashed or hung while it was made, asked in a child: one line, and its own
    // status (kvfuzz check says so itself, with its summary's words).
    std::fprintf(stderr,
                 "kvfuzz: %s: %s; the command cannot start (--no-fork asks in this process, "
                 "for a debugger)\n",
                 argv[1], e.what());
    return kvfuzz::cli::kExitCannotStart;
  } catch (const std::exception& e) {
    // Anything else (out of memory, a filesystem error) still ends in one line.
    std::fprintf(stderr, "kvfuzz: error: %s\n", e.what());
    return kvfuzz::cli::kExitBadInput;
  }
  return exit_status;
}
