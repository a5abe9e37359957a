#include <cstdio>

#include "commands.h"
#include "kvfuzz/engine.h"

namespace kvfuzz::cli {

void add_list_command(CLI::App& app, int& /*exit_status*/) {
  CLI::App* cmd = app.add_subcommand("list", "Name the built-in engines and mutants.");
  cmd->callback([] {
    std::printf("%-24s %-7s %s\n", "engine", "kind", "description");
    for (const EngineInfo& info : engine_registry()) {
      std::printf("%-24s %-7s %s\n", info.name.c_str(), info.mutant ? "mutant" : "honest",
                  info.description.c_str());
    }
  });
}

}  // namespace kvfuzz::cli
