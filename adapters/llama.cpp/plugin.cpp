// The llama.cpp adapter's engines (llama_engine.h: llama-cpp, llama-cpp-f32) through the
// plugin ABI, so that `kvfuzz ... --engine plugin:PATH/libkvfuzz_llama_cpp_plugin.so` runs
// them: model engines (EngineInfo::make_model), for model scenarios only.
#include "kvfuzz/engine_plugin.h"
#include "llama_engine.h"

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] { return kvfuzz::llama_cpp::engines(); });
}

// The model door (kvfuzz/engine_plugin.h): llama.cpp's engines run whole models, so kvfuzz
// takes their make_model from the exported EngineInfos themselves.
extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz::ModelDoor* kvfuzz_model_door(void) {
  return kvfuzz::exported_model_door();
}
