// A plugin library (kvfuzz/engine_abi.h) loaded and its table checked and copied, once per
// file.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_abi.h"

namespace kvfuzz::doors {

// One entry of the plugin's table, checked (right ABI version and struct_size, name valid
// and unique, description valid UTF-8 on one line, the required functions and those its
// capabilities announce all present, every declaration in range) and copied into kvfuzz's
// memory at load. kvfuzz never reads the plugin's table again, so a plugin that changes or
// frees it afterwards changes nothing kvfuzz calls.
struct PluginEntry {
  std::string name;
  std::string description;  // "" when the plugin gave none
  // The entry's values as checked, in this ABI's struct: the fields an older entry lacks
  // are kvfuzz_engine_api_defaults()'. Its name and description are NULL: the strings
  // above are the copies.
  kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
  // The declarations of `api`, as the C++ interface gives them.
  BitwiseClaims bitwise;
  EngineNumerics numerics;
  EngineSupports supports;
};

struct PluginLibrary {
  void* handle = nullptr;  // from dlopen, never closed
  // At least one; filled at load and never changed afterwards.
  std::vector<PluginEntry> engines;
  // The whole-model factories of the plugin's model door (kvfuzz/engine_plugin.h), by
  // engine name, and the names of those that run whole models only (no attention factory).
  // Empty for a plugin without the door.
  std::map<std::string, ModelEngineFactory> model_factories;
  std::set<std::string> whole_model_only;
  // The ABI keeps create's error message valid only until the next create of the library,
  // so kvfuzz never runs two creates of one library at once.
  std::mutex create_mutex;
};

// The library at `path`, loaded on first use and kept loaded for the process: engines made
// from it hold the shared_ptr, and the cache holds one too, because unloading code that
// may have registered exit handlers or thread-locals is not safe. Throws EngineSpecError
// naming `spec`, the path and what was wrong.
std::shared_ptr<PluginLibrary> load_plugin_library(const std::string& spec,
                                                   const std::string& path);

}  // namespace kvfuzz::doors
