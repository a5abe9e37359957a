// C++ engines exported through the plugin ABI (kvfuzz/engine_abi.h): what a plugin built
// from kvfuzz::Engine classes defines, so that `kvfuzz --engine plugin:PATH` runs them.
// The built-in engines' plugin (plugins/builtin) and the glue that the installed CMake
// function kvfuzz_add_engine_plugin() generates for a user's class both come down to
//
//   extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
//     return kvfuzz::export_engines([] { return std::vector<kvfuzz::EngineInfo>{...}; });
//   }
//
// Each entry declares (ABI 2) what the C++ engine declares: capabilities, bitwise claims,
// numerics and supports, asked of it once as kvfuzz asks (probe_declarations). Every entry
// point catches every exception and turns it into a status and a message: an exception
// never unwinds into the host.
#pragma once

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

}  // namespace kvfuzz
