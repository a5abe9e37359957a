// The flash engine's tiling and dispatch constants. They are defined in the harness
// (generate/flash_constants.h) so that the generator can aim chunk and context lengths at
// them; the engine sees them under kvfuzz::cpu.
#pragma once

#include "generate/flash_constants.h"

namespace kvfuzz::cpu {

using kvfuzz::kFlashPartitionKeys;
using kvfuzz::kFlashSplitThreshold;
using kvfuzz::kFlashTileKeys;

}  // namespace kvfuzz::cpu
