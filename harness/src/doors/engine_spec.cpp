// --engine NAME | plugin:PATH[:NAME] | exec:COMMAND (kvfuzz/engine_spec.h).
#include "kvfuzz/engine_spec.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>

#include "doors/external_engines.h"

namespace kvfuzz {

namespace {

constexpr std::string_view kPlugin = "plugin:";
constexpr std::string_view kExec = "exec:";
// The words that stand for a group of built-in engines in a list.
constexpr std::array<std::string_view, 3> kGroups = {"all", "mutants", "every"};

bool is_group(std::string_view word) {
  return std::find(kGroups.begin(), kGroups.end(), word) != kGroups.end();
}

bool is_door_spec(std::string_view spec) {
  return spec.starts_with(kPlugin) || spec.starts_with(kExec);
}

// Whether the text after a comma inside a plugin: or exec: spec starts another spec.
bool starts_another_spec(std::string_view rest) {
  if (is_door_spec(rest)) return true;
  const std::string_view word = rest.substr(0, rest.find(','));
  return is_group(word) || find_engine(word) != nullptr;
}

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

std::vector<std::string> split_engine_list(std::string_view list) {
  std::vector<std::string> specs;
  size_t start = 0;
  while (true) {
    size_t comma = list.find(',', start);
    if (is_door_spec(list.substr(start))) {
      while (comma != std::string_view::npos && !starts_another_spec(list.substr(comma + 1))) {
        comma = list.find(',', comma + 1);
      }
    }
    specs.emplace_back(
        list.substr(start, comma == std::string_view::npos ? list.npos : comma - start));
    if (comma == std::string_view::npos) return specs;
    start = comma + 1;
  }
}

std::vector<std::shared_ptr<const EngineInfo>> resolve_engines(std::string_view list) {
  std::vector<std::shared_ptr<const EngineInfo>> engines;
  const auto add = [&engines](std::shared_ptr<const EngineInfo> engine) {
    const auto same = [&engine](const auto& other) { return other->name == engine->name; };
    if (std::none_of(engines.begin(), engines.end(), same)) engines.push_back(std::move(engine));
  };
  for (const std::string& spec : split_engine_list(list)) {
    if (is_group(spec)) {
      const bool honest = spec != "mutants", mutants = spec != "all";
      for (const EngineInfo& info : engine_registry()) {
        if (info.mutant ? mutants : honest) add(builtin(info));
      }
    } else if (is_door_spec(spec) || find_engine(spec) != nullptr) {
      add(resolve_engine(spec));
    } else {
      throw EngineSpecError("--engine: unknown engine '" + spec + "'" + did_you_mean(spec) +
                            "; expected one of " + engine_names() +
                            ", all, mutants, every, plugin:PATH[:NAME] or exec:COMMAND, or a "
                            "comma-separated list of them (see kvfuzz list)");
    }
  }
  return engines;
}

}  // namespace kvfuzz
