// A shared library that loads but is no plugin: it exports a function under another name
// than kvfuzz_engine_plugin (a typo a user could make). kvfuzz must refuse it at load.
#include "kvfuzz/engine_abi.h"

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugins(void) {
  return nullptr;
}
