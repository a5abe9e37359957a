// The checks every built-in engine makes of its configuration, and of a step's input before
// it touches its cache:
// one output per chunk, sequences in range and distinct within the step, q/k/v sizes that
// match the layout. Shared by the CPU engines (cpu_engine.h) and the CUDA engines.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvfuzz/engine.h"

namespace kvfuzz::common {

// Throws EngineError naming the first field of the layout (or the sequence count) that no
// engine can be made for: sizes below 1, kv_heads not dividing q_heads, a window below 1,
// a rope_theta not above 0.
void check_engine_config(const EngineConfig& config);

// Throws EngineError unless 0 <= seq < sequences; `what` names the call ("step").
void check_sequence(int seq, int sequences, const char* what);

// Throws EngineError on the first bad chunk. `seen` (one entry per sequence) and `step`
// (this step's number, distinct from every earlier one) detect a sequence fed twice.
void check_step_input(const Layout& layout, int sequences, std::span<const ChunkIn> chunks,
                      std::span<ChunkOut> outs, std::vector<uint64_t>& seen, uint64_t step);

}  // namespace kvfuzz::common
