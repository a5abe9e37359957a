// A first, simple scenario generator for `kvfuzz check`: small random layouts, dtypes,
// page sizes and orders, poisons, RoPE and windows, and programs of appends, batched
// steps, decodes and resets. Every scenario it returns passes validate().
#pragma once

#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

Scenario simple_scenario(ChoiceSource& choices);

}  // namespace kvfuzz
