// The objects a Python engine is handed: its configuration (kvfuzz.EngineConfig, the
// C++ EngineConfig read-only, with the exec protocol's field names) and the chunks of a
// step (kvfuzz.Chunk: seq, tokens, q, k, v as numpy arrays); a whole model's configuration
// (kvfuzz.ModelEngineConfig: the attention layout, the model's sizes, its weights) and chunks
// (kvfuzz.ModelChunk: seq, tokens, ids).
#pragma once

#include <nanobind/nanobind.h>

namespace kvfuzz::python {

struct Chunk {
  int seq = 0;
  int tokens = 0;
  nanobind::object q, k, v;
};

// One sequence's new tokens in a whole model's step: ids[token] (an int32 numpy array the
// engine owns).
struct ModelChunk {
  int seq = 0;
  int tokens = 0;
  nanobind::object ids;
};

void bind_engine_types(nanobind::module_& m);

}  // namespace kvfuzz::python
