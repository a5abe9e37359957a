// A plugin built against ABI 1, whose kvfuzz_engine_api ended at `fork` (copied below as
// it was): every built-in engine, its functions taken from the builtin plugin
// (KVFUZZ_BUILTIN_PLUGIN), in a table of ABI 1 entries. kvfuzz must walk the table with
// ABI 1's stride and judge the engines with the default declarations, as before ABI 2.
#include <dlfcn.h>

#include <cstdint>
#include <vector>

#include "kvfuzz/engine_abi.h"

namespace {

// kvfuzz_engine_api of ABI 1, field for field.
struct engine_api_v1 {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* name;
  const char* description;
  uint32_t capabilities;
  uint32_t mutant;
  kvfuzz_engine* (*create)(const kvfuzz_engine_config* config, const char** error);
  void (*destroy)(kvfuzz_engine* engine);
  int (*step)(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
              int32_t count, const char** error);
  int (*reset)(kvfuzz_engine* engine, int32_t seq, const char** error);
  int (*truncate)(kvfuzz_engine* engine, int32_t seq, int64_t keep, const char** error);
  int (*fork)(kvfuzz_engine* engine, int32_t src, int32_t dst, const char** error);
};
static_assert(sizeof(engine_api_v1) == KVFUZZ_ENGINE_API_V1_SIZE,
              "KVFUZZ_ENGINE_API_V1_SIZE must stay the size of ABI 1's kvfuzz_engine_api");

struct V1Table {
  std::vector<engine_api_v1> engines;
  kvfuzz_engine_plugin_table table{};
  bool built = false;

  V1Table() {
    void* builtin = dlopen(KVFUZZ_BUILTIN_PLUGIN, RTLD_NOW | RTLD_LOCAL);  // never closed
    if (builtin == nullptr) return;
    const auto plugin =
        reinterpret_cast<kvfuzz_engine_plugin_fn>(dlsym(builtin, KVFUZZ_ENGINE_PLUGIN_SYMBOL));
    const kvfuzz_engine_plugin_table* from = plugin != nullptr ? plugin() : nullptr;
    if (from == nullptr) return;
    for (uint32_t i = 0; i < from->engine_count; ++i) {
      const kvfuzz_engine_api& e = from->engines[i];
      engines.push_back({1, sizeof(engine_api_v1), e.name, e.description, e.capabilities, e.mutant,
                         e.create, e.destroy, e.step, e.reset, e.truncate, e.fork});
    }
    // The table type is the same in both ABIs; only what engines points at is shorter.
    table = {1, static_cast<uint32_t>(engines.size()),
             reinterpret_cast<const kvfuzz_engine_api*>(engines.data())};
    built = true;
  }
};

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const V1Table v1;
  return v1.built ? &v1.table : nullptr;
}
