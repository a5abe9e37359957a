// The flash engine's constants live with the harness (kvfuzz/flash_constants.h) so the
// generator and the cache-state events can aim at them; the engine uses them from here.
#pragma once

#include "kvfuzz/flash_constants.h"

namespace kvfuzz::cpu {

using kvfuzz::kFlashPartitionKeys;
using kvfuzz::kFlashSplitThreshold;
using kvfuzz::kFlashTileKeys;

}  // namespace kvfuzz::cpu
