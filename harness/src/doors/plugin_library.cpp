// Loading a plugin and checking and copying its table before any engine is made from it,
// so that a broken plugin is refused with one line at --engine time instead of failing
// mid-run, and a plugin that changes its table later cannot change what kvfuzz calls.
#include "doors/plugin_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "doors/abi_fields.h"
#include "kvfuzz/engine_plugin.h"
#include "kvfuzz/engine_spec.h"
#include "support/text.h"

namespace kvfuzz::doors {

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

// A refused name as it may appear in a one-line message (it may be anything): quoted as
// support/text.h escapes it, cut after 64 characters.
std::string quoted_name(std::string_view name) {
  return quote_excerpt(name, 64);
}

// The problem with a description, or "": it reaches reports and saved fixtures, which hold
// one line of valid UTF-8, so a description that is not one line of valid UTF-8 without
// control characters (support/text.h says which are) is refused rather than mended.
std::string description_problem(std::string_view description, const std::string& named) {
  const std::string expected = "; expected one line of UTF-8 text";
  for (size_t i = 0; i < description.size();) {
    const size_t length = utf8_character_length(description.substr(i));
    if (length == 0) {
      return named + " has a description that is not valid UTF-8 (byte " +
             quoted_name(description.substr(i, 1)) + " at offset " + std::to_string(i) + ")" +
             expected;
    }
    const std::string_view character = description.substr(i, length);
    const SafeText shown = safe_utf8(character, Controls::escape);
    if (shown.text != character) {
      return named + " has a description with a control character ('" + shown.text +
             "' at offset " + std::to_string(i) + ")" + expected;
    }
    i += length;
  }
  return "";
}

// The loader's reason, one line of valid UTF-8: it may quote names from the library.
std::string dl_error_text() {
  const char* text = dlerror();
  return text != nullptr ? safe_utf8(text, Controls::blank, 1000).text : "no reason given";
}

// The ABI versions this kvfuzz reads; the size of each one's kvfuzz_engine_api, the stride
// of a table of that version, is abi::entry_size.
bool known_version(uint32_t version) {
  return version >= 1 && version <= KVFUZZ_ENGINE_ABI_VERSION;
}

using abi::entry_size;

std::string entry_size_name(uint32_t version) {
  return version < KVFUZZ_ENGINE_ABI_VERSION
             ? "KVFUZZ_ENGINE_API_V" + std::to_string(version) + "_SIZE"
             : "sizeof(kvfuzz_engine_api)";
}

// "1 and 2": the older versions this kvfuzz still reads.
std::string older_versions() {
  std::string text;
  for (uint32_t v = 1; v < KVFUZZ_ENGINE_ABI_VERSION; ++v) {
    text += (v == 1 ? "" : v + 1 == KVFUZZ_ENGINE_ABI_VERSION ? " and " : ", ") + std::to_string(v);
  }
  return text;
}

// Reads the declarations of a checked entry of ABI `version` into `entry`, each field from
// its slot as doors/abi_fields.h maps it (a field the version lacks keeps its default); the
// problem with the first value out of range, naming the entry and the slot, or "".
std::string take_declarations(const kvfuzz_engine_api& api, uint32_t version,
                              const std::string& named, PluginEntry& entry) {
  EngineDeclarations declared;
  if (std::string problem = abi::read(api, version, declared); !problem.empty()) {
    return named + " has " + problem;
  }
  if (api.reserved != 0) return named + " has reserved " + abi::hex(api.reserved) + "; expected 0";
  entry.bitwise = declared.bitwise;
  entry.numerics = declared.numerics;
  entry.supports = declared.supports;
  return "";
}

// Checks one entry of a table of ABI `version`, already copied out of the plugin's table,
// and copies its strings into `entry`. The problem, or "" when it is complete.
std::string take_entry(const kvfuzz_engine_api& api, uint32_t version, uint32_t index,
                       PluginEntry& entry) {
  const std::string which = "engine " + std::to_string(index);
  if (api.abi_version != version) {
    return which + " has abi_version " + std::to_string(api.abi_version) + "; expected " +
           std::to_string(version) + ", the table's";
  }
  if (api.struct_size != entry_size(version)) {
    return which + " has struct_size " + std::to_string(api.struct_size) + "; expected " +
           std::to_string(entry_size(version)) + ", " + entry_size_name(version) + " in ABI " +
           std::to_string(version);
  }
  if (api.name == nullptr) return which + " has no name (NULL); expected [A-Za-z0-9._-]+";
  entry.name = api.name;
  if (!valid_name(entry.name)) {
    return which + " is named " + quoted_name(entry.name) + "; expected a name of [A-Za-z0-9._-]+";
  }
  const std::string named = "engine '" + entry.name + "'";
  entry.description = api.description != nullptr ? api.description : "";
  if (std::string problem = description_problem(entry.description, named); !problem.empty()) {
    return problem;
  }
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
  if (std::string problem = take_declarations(api, version, named, entry); !problem.empty()) {
    return problem;
  }
  entry.api = api;
  entry.api.name = nullptr;
  entry.api.description = nullptr;
  return "";
}

// Copies the table out of the plugin's memory into `engines`, checking each value as it is
// copied; every field is read once. The problem, or "" when every engine can be used.
std::string take_table(const kvfuzz_engine_plugin_table* given, std::vector<PluginEntry>& engines) {
  const std::string expected = "; expected a table of ABI " +
                               std::to_string(KVFUZZ_ENGINE_ABI_VERSION) + " (kvfuzz/engine_abi.h)";
  if (given == nullptr) {
    return std::string(KVFUZZ_ENGINE_PLUGIN_SYMBOL) + "() returned no table (NULL)" + expected;
  }
  const kvfuzz_engine_plugin_table table = *given;
  if (!known_version(table.abi_version)) {
    return "plugin built for engine ABI " + std::to_string(table.abi_version) +
           ", this kvfuzz speaks " + std::to_string(KVFUZZ_ENGINE_ABI_VERSION) + " and reads " +
           older_versions();
  }
  if (table.engine_count == 0) {
    return "the plugin's table has no engines (engine_count 0); expected at least one";
  }
  if (table.engine_count > kMostEngines) {
    return "the plugin's table claims " + std::to_string(table.engine_count) +
           " engines; expected at most " + std::to_string(kMostEngines);
  }
  if (table.engines == nullptr) {
    return "the plugin's table claims " + std::to_string(table.engine_count) +
           " engines but its engines array is NULL; expected one entry per engine";
  }
  // Entries of an older ABI are shorter: each is copied over the defaults of the fields it
  // lacks, with its own size as the stride.
  const size_t stride = entry_size(table.abi_version);
  const auto* bytes = reinterpret_cast<const unsigned char*>(table.engines);
  engines.resize(table.engine_count);
  std::map<std::string_view, uint32_t> seen;
  for (uint32_t i = 0; i < table.engine_count; ++i) {
    kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
    std::memcpy(&api, bytes + i * stride, stride);
    if (std::string problem = take_entry(api, table.abi_version, i, engines[i]); !problem.empty()) {
      return problem;
    }
    const auto [first, fresh] = seen.emplace(engines[i].name, i);
    if (!fresh) {
      return "engines " + std::to_string(first->second) + " and " + std::to_string(i) +
             " are both named '" + engines[i].name + "'; expected unique names";
    }
  }
  return "";
}

// The model door (kvfuzz/engine_plugin.h), when the library has one: each exported C++
// EngineInfo with make_model gives its table entry of the same name a model factory. What
// is wrong with it, or "" (also when there is no door).
std::string take_model_door(void* handle, PluginLibrary& library) {
  void* symbol = dlsym(handle, KVFUZZ_MODEL_DOOR_SYMBOL);
  if (symbol == nullptr) return "";
  const ModelDoor* door = nullptr;
  try {
    door = reinterpret_cast<ModelDoorFn>(symbol)();
  } catch (...) {
    return std::string(KVFUZZ_MODEL_DOOR_SYMBOL) + "() threw; expected it to return the door";
  }
  if (door == nullptr) return "";  // a door with nothing behind it: the table alone
  if (door->version != kModelDoorVersion || door->struct_size != sizeof(ModelDoor)) {
    return std::string(KVFUZZ_MODEL_DOOR_SYMBOL) + "() returned version " +
           std::to_string(door->version) + " (struct size " + std::to_string(door->struct_size) +
           "); expected version " + std::to_string(kModelDoorVersion) + " (struct size " +
           std::to_string(sizeof(ModelDoor)) + "): rebuild the plugin against this kvfuzz";
  }
  if (door->engines == nullptr) return "";
  for (const EngineInfo& info : *door->engines) {
    if (!info.make_model) continue;
    const bool listed = std::any_of(library.engines.begin(), library.engines.end(),
                                    [&](const PluginEntry& e) { return e.name == info.name; });
    if (!listed) {
      return "the model door names engine " + quote_excerpt(info.name) +
             ", which the plugin's table does not; expected every model engine in the table";
    }
    library.model_factories[info.name] = info.make_model;
    if (!info.make) library.whole_model_only.insert(info.name);
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
  auto library = std::make_shared<PluginLibrary>();
  if (std::string problem = take_table(table, library->engines); !problem.empty()) {
    throw refuse(problem);
  }
  if (std::string problem = take_model_door(handle, *library); !problem.empty()) {
    throw refuse(problem);
  }
  library->handle = handle;
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

}  // namespace kvfuzz::doors
