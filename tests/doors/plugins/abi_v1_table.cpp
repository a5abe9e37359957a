// A plugin built against ABI 1, whose kvfuzz_engine_api ended at `fork` (copied below as
// it was): every built-in engine, its functions taken from the builtin plugin
// (KVFUZZ_BUILTIN_PLUGIN), in a table of ABI 1 entries. kvfuzz must walk the table with
// ABI 1's stride and judge the engines with the default declarations, as before ABI 2.
#include <cstdint>

#include "kvfuzz/engine_abi.h"
#include "older_abi_table.h"

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

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const OlderAbiTable<engine_api_v1> v1(1);
  return v1.table();
}
