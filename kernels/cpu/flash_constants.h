// The flash engine's tiling and dispatch constants. The generator's default engine edges
// (EngineEdges in kvfuzz/generator.h) are these values, so that generated contexts and
// chunks land on, one before and one after them; tests/generate/test_edges.cpp keeps the
// two equal.
#pragma once

namespace kvfuzz::cpu {

// Keys decoded from the storage dtype into the float tile buffer at a time.
inline constexpr int kFlashTileKeys = 8;
// A decode query (one-token chunk) that sees at least this many keys takes the split path.
inline constexpr int kFlashSplitThreshold = 32;
// Keys per partition of the split decode path; partitions are merged by log-sum-exp.
inline constexpr int kFlashPartitionKeys = 16;

}  // namespace kvfuzz::cpu
