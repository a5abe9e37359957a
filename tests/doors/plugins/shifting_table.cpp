// A plugin that changes its table after handing it to kvfuzz. kvfuzz makes engines only
// after it has checked and copied the table, so the first create is "later": it rewrites
// the entry in place, announcing truncate and fork, pointing create, step and reset at
// functions that fail saying the changed table was read, marking the engine a mutant,
// changing its declarations and overwriting its name and description. kvfuzz must go on calling
// exactly what the table held when it was loaded.
//
//   shifty   at load: no capabilities (truncate and fork present but not announced, and
//            failing loudly if called); step writes every row, of zeros
#include <cstdint>
#include <cstring>
#include <new>

#include "kvfuzz/engine_abi.h"

struct kvfuzz_engine {
  int32_t q_heads = 0;
  int32_t value_dim = 0;
  int64_t fed = 0;  // tokens fed, one sequence's worth is enough here
};

namespace {

// Writable, so that the plugin can overwrite them under kvfuzz's feet.
char name[16] = "shifty";
// Valid UTF-8 beyond ASCII (an em dash), which kvfuzz accepts.
char description[64] = "Changes its table after kvfuzz has read it \xe2\x80\x94 on purpose.";
kvfuzz_engine_api engines[1];
kvfuzz_engine_plugin_table table;

void destroy(kvfuzz_engine* engine) {
  delete engine;
}

// What the table points at once changed: each fails, naming the table it came from.
kvfuzz_engine* create_changed(const kvfuzz_engine_config*, const char** error) {
  *error = "create read from the table after it changed";
  return nullptr;
}
int step_changed(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t,
                 const char** error) {
  *error = "step read from the table after it changed";
  return 1;
}
int reset_changed(kvfuzz_engine*, int32_t, const char** error) {
  *error = "reset read from the table after it changed";
  return 1;
}

// In the table from the start, never announced.
int truncate_never(kvfuzz_engine*, int32_t, int64_t, const char** error) {
  *error = "truncate should never be called: KVFUZZ_CAN_TRUNCATE was not announced at load";
  return 1;
}
int fork_never(kvfuzz_engine*, int32_t, int32_t, const char** error) {
  *error = "fork should never be called: KVFUZZ_CAN_FORK was not announced at load";
  return 1;
}

void change_table() {
  kvfuzz_engine_api& api = engines[0];
  api.capabilities = KVFUZZ_CAN_TRUNCATE | KVFUZZ_CAN_FORK;
  api.mutant = 1;
  api.bitwise = KVFUZZ_BITWISE_BATCH;
  api.output_dtype = KVFUZZ_DTYPE_BF16;
  api.max_context = 1;
  api.create = create_changed;
  api.step = step_changed;
  api.reset = reset_changed;
  std::strcpy(name, "renamed");
  std::strcpy(description, "Rewritten after load.");
}

kvfuzz_engine* create(const kvfuzz_engine_config* config, const char** error) {
  kvfuzz_engine* engine = new (std::nothrow) kvfuzz_engine;
  if (engine == nullptr) {
    *error = "out of memory";
    return nullptr;
  }
  engine->q_heads = config->q_heads;
  engine->value_dim = config->value_dim;
  change_table();
  return engine;
}

// Zeros at consecutive positions, one row per token.
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

bool build_table() {
  kvfuzz_engine_api& api = engines[0];
  api = kvfuzz_engine_api_defaults();
  api.name = name;
  api.description = description;
  api.capabilities = 0;
  api.mutant = 0;
  api.create = create;
  api.destroy = destroy;
  api.step = step;
  api.reset = reset;
  api.truncate = truncate_never;
  api.fork = fork_never;
  table.abi_version = KVFUZZ_ENGINE_ABI_VERSION;
  table.engine_count = 1;
  table.engines = engines;
  return true;
}

}  // namespace

// Every call returns the same table, changed or not.
extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const bool built = build_table();
  return built ? &table : nullptr;
}
