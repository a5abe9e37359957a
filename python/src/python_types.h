// The objects a Python engine is handed: its configuration (kvfuzz.EngineConfig, the
// C++ EngineConfig read-only, with the exec protocol's field names) and the chunks of a
// step (kvfuzz.Chunk: seq, tokens, q, k, v as numpy arrays).
#pragma once

#include <nanobind/nanobind.h>

namespace kvfuzz::python {

struct Chunk {
  int seq = 0;
  int tokens = 0;
  nanobind::object q, k, v;
};

void bind_engine_types(nanobind::module_& m);

}  // namespace kvfuzz::python
