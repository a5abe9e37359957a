#include "kvfuzz/engine.h"

#include <string>

namespace kvfuzz {

// The defaults of the optional operations: an engine that does not announce them refuses.
void Engine::truncate(int seq, int64_t /*keep*/) {
  throw EngineError("this engine does not support truncate (seq " + std::to_string(seq) + ")");
}

void Engine::fork(int src, int dst) {
  throw EngineError("this engine does not support fork (" + std::to_string(src) + " -> " +
                    std::to_string(dst) + ")");
}

}  // namespace kvfuzz
