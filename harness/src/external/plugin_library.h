// A plugin library (kvfuzz/engine_abi.h) loaded and its table checked, once per file.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "kvfuzz/engine_abi.h"

namespace kvfuzz::external {

struct PluginLibrary {
  void* handle = nullptr;  // from dlopen, never closed
  // Checked: right ABI version, at least one engine, every entry complete (names valid and
  // unique, the required functions and those its capabilities announce all present).
  const kvfuzz_engine_plugin_table* table = nullptr;
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

}  // namespace kvfuzz::external
