// A plugin built against ABI 4, whose kvfuzz_engine_api ended at `exp_ulps` (copied below
// as it was): every built-in engine, its functions and declarations taken from the builtin
// plugin (KVFUZZ_BUILTIN_PLUGIN), in a table of ABI 4 entries. kvfuzz must walk the table
// with ABI 4's stride, read every ABI 4 declaration, and take no numerics_of (ABI 5): an
// entry that read past its end would take the next entry's first bytes for a function.
#include <cstdint>

#include "kvfuzz/engine_abi.h"
#include "older_abi_table.h"

namespace {

// kvfuzz_engine_api of ABI 4, field for field.
struct engine_api_v4 {
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
  uint32_t numerics;
  int32_t split_partials_dtype;
  int32_t rope_tables_dtype;
  int32_t exp_ulps;
};
static_assert(sizeof(engine_api_v4) == KVFUZZ_ENGINE_API_V4_SIZE,
              "KVFUZZ_ENGINE_API_V4_SIZE must stay the size of ABI 4's kvfuzz_engine_api");

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const OlderAbiTable<engine_api_v4> v4(4);
  return v4.table();
}
