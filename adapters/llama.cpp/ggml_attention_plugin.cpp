// ggml's attention engines (src/ggml_attention.h: ggml-flash-*, ggml-matmul-* and their
// negative controls) through the plugin ABI: `kvfuzz ... --engine
// plugin:PATH/libkvfuzz_ggml_attention_plugin.so:ggml-flash-f16`.
#include "ggml_attention.h"
#include "kvfuzz/engine_plugin.h"

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] { return kvfuzz::ggml_attention::engines(); });
}
