// --engine NAME | plugin:PATH[:NAME] | exec:COMMAND (kvfuzz/engine_spec.h).
#include "kvfuzz/engine_spec.h"

#include <filesystem>
#include <optional>

#include "doors/external_engines.h"

namespace kvfuzz {

namespace {

constexpr std::string_view kPlugin = "plugin:";
constexpr std::string_view kExec = "exec:";

// A built-in engine is owned by the registry: the shared_ptr does not delete it.
std::shared_ptr<const EngineInfo> builtin(const EngineInfo& info) {
  return std::shared_ptr<const EngineInfo>(&info, [](const EngineInfo*) {});
}

std::shared_ptr<const EngineInfo> resolve_plugin(const std::string& spec) {
  const std::string rest = spec.substr(kPlugin.size());
  if (rest.empty()) {
    throw EngineSpecError("--engine " + spec +
                          ": expected plugin:PATH[:NAME], the path of a shared library");
  }
  // PATH may itself hold ':'; the whole rest is the path when such a file exists, else the
  // text after the last ':' names the engine.
  std::error_code ec;
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || std::filesystem::exists(rest, ec) || colon == 0) {
    return doors::plugin_engine(spec, rest, std::nullopt);
  }
  const std::string name = rest.substr(colon + 1);
  if (name.empty()) {
    throw EngineSpecError("--engine " + spec + ": expected an engine name after the last ':'");
  }
  return doors::plugin_engine(spec, rest.substr(0, colon), name);
}

}  // namespace

std::shared_ptr<const EngineInfo> resolve_engine(std::string_view spec_view) {
  const std::string spec(spec_view);
  if (spec.starts_with(kPlugin)) return resolve_plugin(spec);
  if (spec.starts_with(kExec)) {
    const std::string command = spec.substr(kExec.size());
    if (command.find_first_not_of(" \t") == std::string::npos) {
      throw EngineSpecError("--engine " + spec +
                            ": expected exec:COMMAND, a command that speaks the engine protocol");
    }
    return doors::exec_engine(spec, command);
  }
  if (const EngineInfo* info = find_engine(spec)) return builtin(*info);
  throw EngineSpecError("--engine: unknown engine '" + spec + "'" + did_you_mean(spec) +
                        "; expected one of " + engine_names() +
                        ", plugin:PATH[:NAME] or exec:COMMAND (see kvfuzz list)");
}

}  // namespace kvfuzz
