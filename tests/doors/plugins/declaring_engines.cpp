// A plugin of this ABI whose entries declare (kvfuzz/engine_abi.h): kvfuzz must read every
// declaration back exactly as the entry made it.
//
//   declares-all   every declaration away from its default: all four bitwise claims, bf16
//                  output and P, f16 accumulation, rotated keys and queries in storage,
//                  exact angles, f16 and bf16 storage only, head_dim a multiple of 8 up to
//                  256 and value_dim = head_dim, at most 32 q heads, a context of 8192,
//                  RoPE only and no windows
//   declares-some  f32 storage only and keys declared unrotated; the rest left at the
//                  defaults (head_dim_multiple 0 reads as 1)
//   declares-none  kvfuzz_engine_api_defaults(): ABI 1's meaning
//   numerics-of-changes-supports  its numerics_of (ABI 5) also narrows the storage dtypes:
//                  refused, only numerics may follow the layout
//   numerics-of-out-of-range      its numerics_of sets output_dtype 99: refused, naming it
//   numerics-of-fails             its numerics_of returns 1 with a message
//
// The engines write zeros: nothing here is judged, but the probe makes one of each.
#include <cstdint>
#include <new>

#include "kvfuzz/engine_abi.h"

struct kvfuzz_engine {
  int32_t q_heads = 0;
  int32_t value_dim = 0;
  int64_t fed = 0;
};

namespace {

kvfuzz_engine* create(const kvfuzz_engine_config* config, const char** error) {
  kvfuzz_engine* engine = new (std::nothrow) kvfuzz_engine;
  if (engine == nullptr) {
    *error = "out of memory";
    return nullptr;
  }
  engine->q_heads = config->q_heads;
  engine->value_dim = config->value_dim;
  return engine;
}

void destroy(kvfuzz_engine* engine) {
  delete engine;
}

int step(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
         int32_t count, const char** /*error*/) {
  const int64_t row = int64_t{engine->q_heads} * engine->value_dim;
  for (int32_t c = 0; c < count; ++c) {
    for (int64_t t = 0; t < chunks[c].tokens; ++t) {
      for (int64_t i = 0; i < row; ++i) outs[c].out[t * row + i] = 0.0f;
      outs[c].positions[t] = engine->fed++;
    }
    outs[c].rows = chunks[c].tokens;
  }
  return 0;
}

int reset(kvfuzz_engine* engine, int32_t /*seq*/, const char** /*error*/) {
  engine->fed = 0;
  return 0;
}

int changes_supports(kvfuzz_engine* /*engine*/, kvfuzz_engine_api* entry, const char** /*error*/) {
  entry->output_dtype = KVFUZZ_DTYPE_BF16;
  entry->dtypes = 1u << KVFUZZ_DTYPE_BF16;
  return 0;
}

int out_of_range(kvfuzz_engine* /*engine*/, kvfuzz_engine_api* entry, const char** /*error*/) {
  entry->output_dtype = 99;
  return 0;
}

int fails(kvfuzz_engine* /*engine*/, kvfuzz_engine_api* /*entry*/, const char** error) {
  *error = "no numerics for this layout";
  return 1;
}

kvfuzz_engine_api entry(const char* name) {
  kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
  api.name = name;
  api.description = "Declares numerics and supports.";
  api.create = create;
  api.destroy = destroy;
  api.step = step;
  api.reset = reset;
  return api;
}

struct Table {
  kvfuzz_engine_api engines[6];
  kvfuzz_engine_plugin_table table;

  Table()
      : engines{entry("declares-all"),
                entry("declares-some"),
                entry("declares-none"),
                entry("numerics-of-changes-supports"),
                entry("numerics-of-out-of-range"),
                entry("numerics-of-fails")},
        table{KVFUZZ_ENGINE_ABI_VERSION, 6, engines} {
    kvfuzz_engine_api& all = engines[0];
    all.bitwise = KVFUZZ_BITWISE_BATCH | KVFUZZ_BITWISE_SCHEDULE | KVFUZZ_BITWISE_LAYOUT |
                  KVFUZZ_BITWISE_POISON;
    all.output_dtype = KVFUZZ_DTYPE_BF16;
    all.p_dtype = KVFUZZ_DTYPE_BF16;
    all.score_accumulation = KVFUZZ_DTYPE_F16;
    all.value_accumulation = KVFUZZ_DTYPE_F16;
    all.rotated_keys_in_storage = 1;
    all.dtypes = (1u << KVFUZZ_DTYPE_F16) | (1u << KVFUZZ_DTYPE_BF16);
    all.head_dim_multiple = 8;
    all.max_head_dim = 256;
    all.max_q_heads = 32;
    all.max_context = 8192;
    all.rotated_queries_in_storage = 1;
    all.value_dim_is_head_dim = 1;
    all.rope_angles_exact = 1;
    all.supports = KVFUZZ_SUPPORTS_ROPE_REQUIRED | KVFUZZ_SUPPORTS_NO_WINDOWS |
                   KVFUZZ_SUPPORTS_SOFTCAP | KVFUZZ_SUPPORTS_SINKS | KVFUZZ_SUPPORTS_ALIBI |
                   KVFUZZ_SUPPORTS_CHUNKED_LOCAL | KVFUZZ_SUPPORTS_KV_FP8 |
                   KVFUZZ_SUPPORTS_KV_GGML_BLOCKS | KVFUZZ_SUPPORTS_VALUE_FROM_KEY |
                   KVFUZZ_SUPPORTS_KV_AFFINE | KVFUZZ_SUPPORTS_KV_ONE_FORMAT |
                   KVFUZZ_SUPPORTS_KV_TENSOR_SCALES | KVFUZZ_SUPPORTS_ROPE_INTERLEAVED |
                   KVFUZZ_SUPPORTS_ROPE_DIMS | KVFUZZ_SUPPORTS_KV_CHANNEL;
    all.numerics = KVFUZZ_NUMERICS_SPLIT_COMBINE_LSE | KVFUZZ_NUMERICS_P_NORMALISED |
                   KVFUZZ_NUMERICS_QUERY_BLOCKS;
    all.split_partials_dtype = KVFUZZ_DTYPE_BF16;
    all.rope_tables_dtype = KVFUZZ_DTYPE_BF16;
    all.exp_ulps = 1024;

    kvfuzz_engine_api& some = engines[1];
    some.rotated_keys_in_storage = 0;
    some.dtypes = 1u << KVFUZZ_DTYPE_F32;
    some.head_dim_multiple = 0;

    engines[3].numerics_of = changes_supports;
    engines[4].numerics_of = out_of_range;
    engines[5].numerics_of = fails;
  }
};

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const Table table;
  return &table.table;
}
