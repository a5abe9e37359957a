// plugin:PATH[:NAME] (kvfuzz/engine_spec.h): one entry of a checked plugin table as an
// EngineInfo whose factory makes PluginEngines.
#include <memory>
#include <string>

#include "external_engines.h"
#include "plugin_adapter.h"
#include "plugin_library.h"

namespace kvfuzz::external {

namespace {

std::string engine_names(const kvfuzz_engine_plugin_table& table) {
  std::string names;
  for (uint32_t i = 0; i < table.engine_count; ++i) {
    names += (i == 0 ? "" : ", ") + std::string(table.engines[i].name);
  }
  return names;
}

const kvfuzz_engine_api& select_entry(const std::string& spec,
                                      const kvfuzz_engine_plugin_table& table,
                                      const std::optional<std::string>& name) {
  if (!name) {
    if (table.engine_count == 1) return table.engines[0];
    throw EngineSpecError("--engine " + spec + ": the plugin has " +
                          std::to_string(table.engine_count) + " engines; add :NAME, one of " +
                          engine_names(table));
  }
  for (uint32_t i = 0; i < table.engine_count; ++i) {
    if (*name == table.engines[i].name) return table.engines[i];
  }
  throw EngineSpecError("--engine " + spec + ": the plugin has no engine '" + *name +
                        "'; expected one of " + engine_names(table));
}

}  // namespace

std::shared_ptr<const EngineInfo> plugin_engine(const std::string& spec, const std::string& path,
                                                const std::optional<std::string>& name) {
  std::shared_ptr<PluginLibrary> library = load_plugin_library(spec, path);
  const kvfuzz_engine_api& api = select_entry(spec, *library->table, name);
  auto info = std::make_shared<EngineInfo>();
  info->name = spec;
  info->description = api.description != nullptr ? api.description : "";
  info->mutant = api.mutant != 0;
  info->make = [library, &api](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<PluginEngine>(library, api, config);
  };
  return info;
}

}  // namespace kvfuzz::external
