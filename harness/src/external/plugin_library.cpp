// Loading a plugin and checking its table before any engine is made from it, so that a
// broken plugin is refused with one line at --engine time instead of failing mid-run.
#include "plugin_library.h"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <string_view>

#include "kvfuzz/engine_spec.h"

namespace kvfuzz::external {

namespace {

// More entries than any plugin needs; it bounds what kvfuzz reads from a table whose
// engine_count is garbage.
constexpr uint32_t kMostEngines = 1024;

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string dl_error_text() {
  const char* text = dlerror();
  return text != nullptr ? text : "no reason given";
}

// The problem with one entry, or "" when it is complete.
std::string entry_problem(const kvfuzz_engine_api& api, uint32_t index) {
  const std::string which = "engine " + std::to_string(index);
  if (api.struct_size != sizeof(kvfuzz_engine_api)) {
    return which + " has struct_size " + std::to_string(api.struct_size) + "; expected " +
           std::to_string(sizeof(kvfuzz_engine_api)) + ", sizeof(kvfuzz_engine_api) in ABI " +
           std::to_string(KVFUZZ_ENGINE_ABI_VERSION);
  }
  if (api.name == nullptr) return which + " has no name (NULL); expected [A-Za-z0-9._-]+";
  if (!valid_name(api.name)) {
    return which + " is named '" + api.name + "'; expected a name of [A-Za-z0-9._-]+";
  }
  const std::string named = "engine '" + std::string(api.name) + "'";
  const std::pair<const char*, bool> required[] = {{"create", api.create != nullptr},
                                                   {"destroy", api.destroy != nullptr},
                                                   {"step", api.step != nullptr},
                                                   {"reset", api.reset != nullptr}};
  for (const auto& [function, present] : required) {
    if (!present) return named + " has no " + function + " function (NULL); every engine needs one";
  }
  if ((api.capabilities & KVFUZZ_CAN_TRUNCATE) != 0 && api.truncate == nullptr) {
    return named + " announces KVFUZZ_CAN_TRUNCATE but its truncate function is NULL";
  }
  if ((api.capabilities & KVFUZZ_CAN_FORK) != 0 && api.fork == nullptr) {
    return named + " announces KVFUZZ_CAN_FORK but its fork function is NULL";
  }
  return "";
}

// The problem with the table, or "" when every engine in it can be used.
std::string table_problem(const kvfuzz_engine_plugin_table* table) {
  const std::string expected = "; expected a table of ABI " +
                               std::to_string(KVFUZZ_ENGINE_ABI_VERSION) + " (kvfuzz/engine_abi.h)";
  if (table == nullptr) {
    return std::string(KVFUZZ_ENGINE_PLUGIN_SYMBOL) + "() returned no table (NULL)" + expected;
  }
  if (table->abi_version != KVFUZZ_ENGINE_ABI_VERSION) {
    return "plugin built for engine ABI " + std::to_string(table->abi_version) +
           ", this kvfuzz speaks " + std::to_string(KVFUZZ_ENGINE_ABI_VERSION);
  }
  if (table->engine_count == 0 || table->engines == nullptr) {
    return "the plugin's table has no engines (engine_count " +
           std::to_string(table->engine_count) + ", engines " +
           (table->engines == nullptr ? "NULL" : "set") + "); expected at least one";
  }
  if (table->engine_count > kMostEngines) {
    return "the plugin's table claims " + std::to_string(table->engine_count) +
           " engines; expected at most " + std::to_string(kMostEngines);
  }
  std::map<std::string_view, uint32_t> seen;
  for (uint32_t i = 0; i < table->engine_count; ++i) {
    const kvfuzz_engine_api& api = table->engines[i];
    if (std::string problem = entry_problem(api, i); !problem.empty()) return problem;
    const auto [first, fresh] = seen.emplace(api.name, i);
    if (!fresh) {
      return "engines " + std::to_string(first->second) + " and " + std::to_string(i) +
             " are both named '" + api.name + "'; expected unique names";
    }
  }
  return "";
}

// Loads and checks; the caller caches.
std::shared_ptr<PluginLibrary> load(const std::string& spec, const std::string& canonical) {
  const auto refuse = [&](const std::string& problem) {
    return EngineSpecError("--engine " + spec + ": " + problem);
  };
  dlerror();  // clear any earlier message
  // RTLD_NOW: a library with unresolved symbols is refused here, not mid-run. RTLD_LOCAL:
  // two plugins defining the same names do not bind to each other's.
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw refuse("cannot load the library: " + dl_error_text() +
                 "; expected a shared library exporting " + KVFUZZ_ENGINE_PLUGIN_SYMBOL);
  }
  // From here on the library stays loaded even when refused: its constructors have run
  // (see plugin_library.h); loading it again only counts up dlopen's reference.
  dlerror();
  void* symbol = dlsym(handle, KVFUZZ_ENGINE_PLUGIN_SYMBOL);
  if (symbol == nullptr) {
    throw refuse(std::string("the library has no symbol ") + KVFUZZ_ENGINE_PLUGIN_SYMBOL + " (" +
                 dl_error_text() + "); expected it defined with KVFUZZ_PLUGIN_EXPORT " +
                 "(kvfuzz/engine_abi.h)");
  }
  const auto entry = reinterpret_cast<kvfuzz_engine_plugin_fn>(symbol);
  const kvfuzz_engine_plugin_table* table = nullptr;
  try {
    table = entry();
  } catch (...) {
    throw refuse(std::string(KVFUZZ_ENGINE_PLUGIN_SYMBOL) +
                 "() threw a C++ exception across the C ABI; expected it to return a table");
  }
  if (std::string problem = table_problem(table); !problem.empty()) throw refuse(problem);
  auto library = std::make_shared<PluginLibrary>();
  library->handle = handle;
  library->table = table;
  return library;
}

}  // namespace

std::shared_ptr<PluginLibrary> load_plugin_library(const std::string& spec,
                                                   const std::string& path) {
  // The canonical path is the cache key, so ./lib.so and /abs/lib.so load once. A path
  // that does not resolve goes to dlopen made absolute (a bare name would otherwise be
  // searched for in the system's library directories), which says why it cannot load.
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(path, ec);
  if (ec) resolved = std::filesystem::absolute(path, ec);
  const std::string key = resolved.string();

  static std::mutex cache_mutex;
  static std::map<std::string, std::shared_ptr<PluginLibrary>> cache;
  const std::lock_guard<std::mutex> lock(cache_mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  std::shared_ptr<PluginLibrary> library = load(spec, key);
  cache.emplace(key, library);
  return library;
}

}  // namespace kvfuzz::external
