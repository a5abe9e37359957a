// What resolving an --engine spec says when it fails: the EngineSpecError's one line, or
// "(resolved)" when the spec resolved. Shared by the doors' and the model door's tests.
#pragma once

#include <string>

#include "kvfuzz/engine_spec.h"

namespace kvfuzz::test {

inline std::string spec_error(const std::string& spec) {
  try {
    resolve_engine(spec);
  } catch (const EngineSpecError& e) {
    return e.what();
  }
  return "(resolved)";
}

}  // namespace kvfuzz::test
