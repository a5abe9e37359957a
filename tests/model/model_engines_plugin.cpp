// The built-in whole-model engines as a C++ plugin (kvfuzz/engine_plugin.h): the C table
// names them, the model door hands kvfuzz their make_model.
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_plugin.h"

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] { return kvfuzz::model_engine_registry(); });
}

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz::ModelDoor* kvfuzz_model_door(void) {
  return kvfuzz::exported_model_door();
}
