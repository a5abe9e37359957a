// C++ engines exported through the plugin ABI (kvfuzz/engine_abi.h): what a plugin built
// from kvfuzz::Engine classes defines, so that `kvfuzz --engine plugin:PATH` runs them.
// The built-in engines' plugin (plugins/builtin) and the glue that the installed CMake
// function kvfuzz_add_engine_plugin() generates for a user's class both come down to
//
//   extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
//     return kvfuzz::export_engines([] { return std::vector<kvfuzz::EngineInfo>{...}; });
//   }
//
// Each entry declares (ABI 3) what the C++ engine declares: capabilities, bitwise claims,
// numerics and supports, asked of it once as kvfuzz asks (probe_declarations). Every entry
// point catches every exception and turns it into a status and a message: an exception
// never unwinds into the host.
//
// Whole-model engines (EngineInfo::make_model, kvfuzz/model_engine.h) cannot cross a C
// ABI: they come through the model door, a second symbol that hands kvfuzz the exported
// C++ EngineInfos themselves,
//
//   extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz::ModelDoor* kvfuzz_model_door(void) {
//     return kvfuzz::exported_model_door();
//   }
//
// so a plugin carrying one must be built against the same kvfuzz headers and C++ standard
// library as the kvfuzz that loads it (the installed package's; kvfuzz_add_engine_plugin's
// glue defines the symbol). Each model engine also has an entry in the C table, with its
// declarations, so that `plugin:PATH:NAME` names it; its C create refuses ("runs whole
// models only") when the engine has no attention factory.
#pragma once

#include <cstdint>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_abi.h"

namespace kvfuzz {

// The most engines one plugin exports (the ABI's create names no engine, so each entry
// has a create function of its own, one per slot).
inline constexpr size_t kPluginEngineSlots = 64;

// The plugin's table, built at the first call from `engines()` and kept for the life of
// the library (later calls return the same table). Nothing (nullptr, which kvfuzz reports
// as a plugin without a table) when `engines` throws or returns more than
// kPluginEngineSlots engines. One table per library: a second call with other engines
// still returns the first table.
const kvfuzz_engine_plugin_table* export_engines(std::vector<EngineInfo> (*engines)()) noexcept;

// The model door's symbol and what it returns: the EngineInfos of export_engines' table
// (every one, in the table's order; kvfuzz takes make_model from those that have it).
#define KVFUZZ_MODEL_DOOR_SYMBOL "kvfuzz_model_door"
inline constexpr uint32_t kModelDoorVersion = 1;
struct ModelDoor {
  uint32_t version = kModelDoorVersion;
  uint32_t struct_size = sizeof(ModelDoor);
  const std::vector<EngineInfo>* engines = nullptr;
};
using ModelDoorFn = const ModelDoor* (*)();

// The door over the engines export_engines() exported; nullptr before its first call (the
// host always asks for the table first) or when it failed.
const ModelDoor* exported_model_door() noexcept;

}  // namespace kvfuzz
