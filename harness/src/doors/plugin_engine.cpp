// plugin:PATH[:NAME] (kvfuzz/engine_spec.h): one entry of a checked plugin table, as kvfuzz
// copied it at load, as an EngineInfo whose factory makes PluginEngines.
#include <memory>
#include <string>
#include <vector>

#include "doors/external_engines.h"
#include "doors/plugin_adapter.h"
#include "doors/plugin_library.h"

namespace kvfuzz::doors {

namespace {

std::string engine_names(const std::vector<PluginEntry>& engines) {
  std::string names;
  for (const PluginEntry& entry : engines) {
    names += (names.empty() ? "" : ", ") + entry.name;
  }
  return names;
}

const PluginEntry& select_entry(const std::string& spec, const std::vector<PluginEntry>& engines,
                                const std::optional<std::string>& name) {
  if (!name) {
    if (engines.size() == 1) return engines[0];
    throw EngineSpecError("--engine " + spec + ": the plugin has " +
                          std::to_string(engines.size()) + " engines; add :NAME, one of " +
                          engine_names(engines));
  }
  for (const PluginEntry& entry : engines) {
    if (*name == entry.name) return entry;
  }
  throw EngineSpecError("--engine " + spec + ": the plugin has no engine '" + *name +
                        "'; expected one of " + engine_names(engines));
}

}  // namespace

std::shared_ptr<const EngineInfo> plugin_engine(const std::string& spec, const std::string& path,
                                                const std::optional<std::string>& name) {
  std::shared_ptr<PluginLibrary> library = load_plugin_library(spec, path);
  const PluginEntry& entry = select_entry(spec, library->engines, name);
  auto info = std::make_shared<EngineInfo>();
  info->name = spec;
  info->description = entry.description;
  info->mutant = entry.api.mutant != 0;
  // kvfuzz's copy of the entry, by value: nothing here points into the plugin.
  info->make = [library, entry](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<PluginEngine>(library, entry, config);
  };
  return info;
}

}  // namespace kvfuzz::doors
