// A plugin built against ABI 3, whose kvfuzz_engine_api ended at `reserved` (copied below
// as it was): every built-in engine, its functions and declarations taken from the builtin
// plugin (KVFUZZ_BUILTIN_PLUGIN), in a table of ABI 3 entries. kvfuzz must walk the table
// with ABI 3's stride, read every ABI 3 declaration, and give the fields ABI 4 added
// (numerics flags, split_partials_dtype) their defaults: an entry that read past its end
// would take the next entry's abi_version (3) for KVFUZZ_NUMERICS_SPLIT_COMBINE_LSE.
#include <cstdint>

#include "kvfuzz/engine_abi.h"
#include "older_abi_table.h"

namespace {

// kvfuzz_engine_api of ABI 3, field for field.
struct engine_api_v3 {
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
  uint32_t bitwise;
  int32_t output_dtype;
  int32_t p_dtype;
  int32_t score_accumulation;
  int32_t value_accumulation;
  int32_t rotated_keys_in_storage;
  uint32_t dtypes;
  int32_t head_dim_multiple;
  int32_t max_head_dim;
  int32_t max_q_heads;
  int32_t max_context;
  int32_t rotated_queries_in_storage;
  uint32_t value_dim_is_head_dim;
  int32_t rope_angles_exact;
  uint32_t supports;
  uint32_t reserved;
};
static_assert(sizeof(engine_api_v3) == KVFUZZ_ENGINE_API_V3_SIZE,
              "KVFUZZ_ENGINE_API_V3_SIZE must stay the size of ABI 3's kvfuzz_engine_api");

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const OlderAbiTable<engine_api_v3> v3(3);
  return v3.table();
}
