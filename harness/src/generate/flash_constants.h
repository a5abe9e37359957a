// The flash engine's tiling and dispatch constants, public so that the generator and the
// cache-state events can aim at them (a context just below, at and above the split
// threshold; contexts that end inside a tile and on a tile or partition boundary). Keep
// them small and change them only together with the generator.
#pragma once

namespace kvfuzz {

// Keys decoded from the storage dtype into the float tile buffer at a time.
inline constexpr int kFlashTileKeys = 8;
// A decode query (one-token chunk) that sees at least this many keys takes the split path.
inline constexpr int kFlashSplitThreshold = 32;
// Keys per partition of the split decode path; partitions are merged by log-sum-exp.
inline constexpr int kFlashPartitionKeys = 16;

}  // namespace kvfuzz
