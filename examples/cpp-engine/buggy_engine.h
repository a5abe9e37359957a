// BuggyEngine: MyEngine with the bug kvfuzz was built to catch. Its causal mask starts at
// the first token of the chunk instead of at the start of the sequence, as a prefill
// kernel written for an empty cache does: a chunk never sees the cached prefix, and a
// one-token decode sees only itself. Prefill from an empty cache is still right, which is
// why tests that only run whole prompts miss it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "my_engine.h"

class BuggyEngine : public MyEngine {
 public:
  using MyEngine::MyEngine;

 protected:
  int64_t first_visible(int64_t entry, int64_t chunk_start) const override {
    return std::max(MyEngine::first_visible(entry, chunk_start), chunk_start);
  }
};
