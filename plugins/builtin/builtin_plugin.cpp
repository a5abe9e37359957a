// Every built-in engine (kvfuzz list: the honest ones and the mutants) exported through the
// C plugin ABI, as any user's plugin of C++ engines is (kvfuzz/engine_plugin.h). It proves
// the plugin door end to end: an engine loaded this way must give the same rows as the same
// engine linked in, and a mutant loaded this way must be rejected.
//
//   kvfuzz check --engine plugin:build/default/plugins/libkvfuzz_builtin_engines.so:paged
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_abi.h"
#include "kvfuzz/engine_plugin.h"

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] { return kvfuzz::engine_registry(); });
}
