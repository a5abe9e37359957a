// The llama.cpp adapter's engines (llama_engine.h: llama-cpp, llama-cpp-f32) through the
// plugin ABI, so that `kvfuzz ... --engine plugin:PATH/libkvfuzz_llama_cpp_plugin.so` runs
// them: model engines (EngineInfo::make_model), for model scenarios only.
#include "kvfuzz/engine_plugin.h"
#include "llama_engine.h"

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] { return kvfuzz::llama_cpp::engines(); });
}
