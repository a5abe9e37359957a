// A well-formed plugin whose engines misbehave at call time, each in one way that kvfuzz
// must turn into an engine error naming the problem (never a crash):
//
//   wrong-row-count      step writes one row fewer than the chunk has tokens
//   calls-fail           every call after create fails with a message naming the call
//   calls-fail-silently  every call after create fails without a message (NULL)
//   create-fails         create returns NULL with a message
//   step-throws          step lets a C++ exception escape (breaking the ABI's contract)
//   unannounced-ops      announces no capability yet has truncate and fork functions that
//                        fail loudly: kvfuzz must never call them
//
// Having several engines, it is also the plugin that needs :NAME on the command line.
#include <cstdint>
#include <new>
#include <stdexcept>

#include "kvfuzz/engine_abi.h"

struct kvfuzz_engine {
  int32_t q_heads = 0;
  int32_t value_dim = 0;
  int64_t fed = 0;  // tokens fed, one sequence's worth is enough here
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

kvfuzz_engine* create_fails(const kvfuzz_engine_config* /*config*/, const char** error) {
  *error = "no device memory for this layout";
  return nullptr;
}

void destroy(kvfuzz_engine* engine) {
  delete engine;
}

// Writes zeros at consecutive positions, `missing` rows short of every chunk.
int step_zeros(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
               int32_t count, int32_t missing) {
  const int64_t row = int64_t{engine->q_heads} * engine->value_dim;
  for (int32_t c = 0; c < count; ++c) {
    const int64_t rows = chunks[c].tokens > missing ? chunks[c].tokens - missing : 0;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t i = 0; i < row; ++i) outs[c].out[t * row + i] = 0.0f;
      outs[c].positions[t] = engine->fed++;
    }
    outs[c].rows = rows;
  }
  return 0;
}

int step_short(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
               int32_t count, const char** /*error*/) {
  return step_zeros(engine, chunks, outs, count, 1);
}

// Every row, of zeros: wrong values, but a run goes on past it to the next operation.
int step_full(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs,
              int32_t count, const char** /*error*/) {
  return step_zeros(engine, chunks, outs, count, 0);
}

int reset_ok(kvfuzz_engine* engine, int32_t /*seq*/, const char** /*error*/) {
  engine->fed = 0;
  return 0;
}

int step_fails(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t,
               const char** error) {
  *error = "step refused: the KV cache is on fire";
  return 1;
}
int reset_fails(kvfuzz_engine*, int32_t, const char** error) {
  *error = "reset refused: the KV cache is on fire";
  return 1;
}
int truncate_fails(kvfuzz_engine*, int32_t, int64_t, const char** error) {
  *error = "truncate refused: the KV cache is on fire";
  return 1;
}
int fork_fails(kvfuzz_engine*, int32_t, int32_t, const char** error) {
  *error = "fork refused: the KV cache is on fire";
  return 1;
}

// The silent ones leave *error as kvfuzz set it (NULL) and say nothing.
int step_fails_silently(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t,
                        const char**) {
  return 1;
}
int reset_fails_silently(kvfuzz_engine*, int32_t, const char**) {
  return 1;
}
int truncate_fails_silently(kvfuzz_engine*, int32_t, int64_t, const char**) {
  return 2;
}
int fork_fails_silently(kvfuzz_engine*, int32_t, int32_t, const char**) {
  return -1;
}

// Present in the table but not announced in its capabilities.
int truncate_never(kvfuzz_engine*, int32_t, int64_t, const char** error) {
  *error = "truncate should never be called: KVFUZZ_CAN_TRUNCATE is not announced";
  return 1;
}
int fork_never(kvfuzz_engine*, int32_t, int32_t, const char** error) {
  *error = "fork should never be called: KVFUZZ_CAN_FORK is not announced";
  return 1;
}

int step_throws(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t, const char**) {
  throw std::runtime_error("a C++ exception where a status belongs");
}

kvfuzz_engine_api entry(const char* name, const char* description) {
  kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
  api.name = name;
  api.description = description;
  api.create = create;
  api.destroy = destroy;
  return api;
}

struct Table {
  kvfuzz_engine_api engines[6];
  kvfuzz_engine_plugin_table table;

  Table()
      : engines{entry("wrong-row-count", "Writes one row fewer than each chunk has tokens."),
                entry("calls-fail", "Every call fails with a message."),
                entry("calls-fail-silently", "Every call fails without a message."),
                entry("create-fails", "Cannot be created."),
                entry("step-throws", "Throws a C++ exception out of step."),
                entry("unannounced-ops", "Has truncate and fork but does not announce them.")},
        table{KVFUZZ_ENGINE_ABI_VERSION, 6, engines} {
    engines[0].step = step_short;
    engines[0].reset = reset_ok;

    engines[1].capabilities = KVFUZZ_CAN_TRUNCATE | KVFUZZ_CAN_FORK;
    engines[1].step = step_fails;
    engines[1].reset = reset_fails;
    engines[1].truncate = truncate_fails;
    engines[1].fork = fork_fails;

    engines[2].capabilities = KVFUZZ_CAN_TRUNCATE | KVFUZZ_CAN_FORK;
    engines[2].step = step_fails_silently;
    engines[2].reset = reset_fails_silently;
    engines[2].truncate = truncate_fails_silently;
    engines[2].fork = fork_fails_silently;

    engines[3].create = create_fails;
    engines[3].step = step_fails;
    engines[3].reset = reset_fails;

    engines[4].step = step_throws;
    engines[4].reset = reset_ok;

    engines[5].capabilities = 0;
    engines[5].step = step_full;
    engines[5].reset = reset_ok;
    engines[5].truncate = truncate_never;
    engines[5].fork = fork_never;
  }
};

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const Table table;
  return &table.table;
}
