// The builtin plugin's engines (KVFUZZ_BUILTIN_PLUGIN) re-exported in a table of an older
// ABI, as a plugin built against that version's header would export them: `Entry` is that
// version's kvfuzz_engine_api (each plugin file copies it field for field, as it was, and
// checks its size). The fields of an older version never move (engine_abi.h), so an entry
// is the current one's first sizeof(Entry) bytes with that version and size; its functions
// stay the builtin plugin's. kvfuzz must walk such a table with the older version's stride.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kvfuzz/engine_abi.h"

template <class Entry>
class OlderAbiTable {
  static_assert(std::is_trivially_copyable_v<Entry> && sizeof(Entry) <= sizeof(kvfuzz_engine_api));

 public:
  explicit OlderAbiTable(uint32_t version) {
    void* builtin = dlopen(KVFUZZ_BUILTIN_PLUGIN, RTLD_NOW | RTLD_LOCAL);  // never closed
    if (builtin == nullptr) return;
    const auto plugin =
        reinterpret_cast<kvfuzz_engine_plugin_fn>(dlsym(builtin, KVFUZZ_ENGINE_PLUGIN_SYMBOL));
    const kvfuzz_engine_plugin_table* from = plugin != nullptr ? plugin() : nullptr;
    if (from == nullptr) return;
    for (uint32_t i = 0; i < from->engine_count; ++i) {
      Entry entry;
      std::memcpy(&entry, &from->engines[i], sizeof(Entry));
      entry.abi_version = version;
      entry.struct_size = sizeof(Entry);
      engines_.push_back(entry);
    }
    // The table type is the same in every ABI; only what `engines` points at is shorter.
    table_ = {version, static_cast<uint32_t>(engines_.size()),
              reinterpret_cast<const kvfuzz_engine_api*>(engines_.data())};
    built_ = true;
  }
  const kvfuzz_engine_plugin_table* table() const { return built_ ? &table_ : nullptr; }

 private:
  std::vector<Entry> engines_;
  kvfuzz_engine_plugin_table table_{};
  bool built_ = false;
};
