// A plugin whose engines take the process down in the middle of a case, as a kernel with
// an out-of-bounds write or a failed assertion does: kvfuzz check must turn each into a
// finding (tests/cli/test_check_ci.cpp), not die with it.
//
//   segfault   writes through a null pointer on its first step
//   abort      says so on stderr and calls abort() on its first step (a failed assert)
//   exit       writes a sanitizer-like report and exits with status 1 on its first step,
//              as AddressSanitizer does after its report
//   segfault-in-second
//              writes through a null pointer when the second engine of its process is made:
//              in a fresh worker, after prefix has judged the first, under the next property
//   noisy-segfault
//              writes its first words, 40,000 bytes of noise and its last words to stderr,
//              then through a null pointer on its first step: a failure keeps both words
//   segfault-on-one-token
//              rows of zeros (wrong, no crash) for chunks of two tokens or more, a write
//              through a null pointer for a chunk of one token: a shrink's candidates that
//              split a chunk down to one token crash (tests/cli/test_isolation.cpp)
//
// and two that never get as far as a case: kvfuzz check makes every engine once and asks
// it for its declarations before it generates anything, and must survive that too.
//
//   segfault-in-create  writes through a null pointer in create (a driver that is not there)
//   hang-in-create      never returns from create (a device that never answers)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <thread>

#include "kvfuzz/engine_abi.h"

struct kvfuzz_engine {
  int unused = 0;
};

namespace {

kvfuzz_engine* create(const kvfuzz_engine_config* /*config*/, const char** error) {
  kvfuzz_engine* engine = new (std::nothrow) kvfuzz_engine;
  if (engine == nullptr) *error = "out of memory";
  return engine;
}

// Volatile both ways: the compiler may neither assume the pointer is null nor drop the
// write (a store it can prove undefined is otherwise deleted).
volatile int* volatile g_nowhere = nullptr;

kvfuzz_engine* create_segfault(const kvfuzz_engine_config*, const char**) {
  *g_nowhere = 1;
  return nullptr;
}

kvfuzz_engine* create_segfault_second(const kvfuzz_engine_config* config, const char** error) {
  static int made = 0;
  if (++made == 2) *g_nowhere = 1;
  return create(config, error);
}

kvfuzz_engine* create_hang(const kvfuzz_engine_config*, const char**) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void destroy(kvfuzz_engine* engine) {
  delete engine;
}

int reset_ok(kvfuzz_engine*, int32_t, const char**) {
  return 0;
}

// Rows of zeros, every position 0: wrong (prefix fails it), but no crash.
int step_ok(kvfuzz_engine*, const kvfuzz_chunk_in* chunks, kvfuzz_chunk_out* outs, int32_t count,
            const char**) {
  for (int32_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < outs[i].out_capacity; ++j) outs[i].out[j] = 0;
    for (int64_t j = 0; j < outs[i].positions_capacity; ++j) outs[i].positions[j] = 0;
    outs[i].rows = chunks[i].tokens;
  }
  return 0;
}

int step_segfault_on_one_token(kvfuzz_engine* engine, const kvfuzz_chunk_in* chunks,
                               kvfuzz_chunk_out* outs, int32_t count, const char** error) {
  for (int32_t i = 0; i < count; ++i) {
    if (chunks[i].tokens == 1) *g_nowhere = 1;
  }
  return step_ok(engine, chunks, outs, count, error);
}

int step_segfault(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t,
                  const char**) {
  *g_nowhere = 1;
  return 0;
}

int step_noisy_segfault(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t,
                        const char**) {
  std::fputs("crashing_engines: first words before the crash\n", stderr);
  for (int i = 0; i < 2000; ++i) std::fputs("crashing_engines: noise...........\n", stderr);
  std::fputs("crashing_engines: last words before the crash\n", stderr);
  std::fflush(stderr);
  *g_nowhere = 1;
  return 0;
}

int step_abort(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t, const char**) {
  std::fputs("crashing_engines: assertion 'block < pool' failed\n", stderr);
  std::abort();
}

int step_exit(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t, const char**) {
  std::fputs("==1==ERROR: AddressSanitizer: heap-buffer-overflow (crashing_engines)\n", stderr);
  std::fputs("SUMMARY: AddressSanitizer: heap-buffer-overflow (crashing_engines) in step_exit\n",
             stderr);
  std::fflush(stderr);
  std::_Exit(1);
}

kvfuzz_engine_api entry(const char* name, const char* description,
                        int (*step)(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*,
                                    int32_t, const char**),
                        kvfuzz_engine* (*make)(const kvfuzz_engine_config*,
                                               const char**) = create) {
  kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
  api.name = name;
  api.description = description;
  api.create = make;
  api.destroy = destroy;
  api.step = step;
  api.reset = reset_ok;
  return api;
}

struct Table {
  kvfuzz_engine_api engines[8];
  kvfuzz_engine_plugin_table table;

  Table()
      : engines{entry("segfault", "Writes through a null pointer on its first step.",
                      step_segfault),
                entry("abort", "Calls abort() on its first step.", step_abort),
                entry(
                    "noisy-segfault",
                    "Writes 40,000 bytes to stderr, then through a null pointer on its first step.",
                    step_noisy_segfault),
                entry("exit", "Reports like a sanitizer and exits on its first step.", step_exit),
                entry("segfault-in-create", "Writes through a null pointer when it is made.",
                      step_segfault, create_segfault),
                entry("hang-in-create", "Never returns when it is made.", step_segfault,
                      create_hang),
                entry("segfault-in-second",
                      "Writes through a null pointer when its process makes a second one.", step_ok,
                      create_segfault_second),
                entry("segfault-on-one-token",
                      "Rows of zeros; writes through a null pointer on a chunk of one token.",
                      step_segfault_on_one_token)},
        table{KVFUZZ_ENGINE_ABI_VERSION, 8, engines} {}
};

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const Table table;
  return &table.table;
}
