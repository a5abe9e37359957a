// The low-precision numerics the built-in engines can be given, each as a real kernel
// computes (EngineNumerics): the registry's flash-bf16, flash-f16 and contiguous-f16acc are
// honest engines with one of them, and every mutant is rebuilt on each of them in the
// tests, so that a bug is shown to stay visible above each arithmetic's noise.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "kvfuzz/engine.h"

namespace kvfuzz::cpu {

struct NumericsProfile {
  std::string_view name;
  std::string_view description;  // what real kernel computes so
  EngineNumerics numerics;
  EngineSupports supports;
};

const std::vector<NumericsProfile>& numerics_profiles();
const NumericsProfile& numerics_profile(std::string_view name);  // throws when unknown

// `engine` (a built-in engine or mutant: a CpuEngine) declaring and computing with the
// profile's numerics.
std::unique_ptr<Engine> with_numerics(std::unique_ptr<Engine> engine,
                                      const NumericsProfile& profile);

}  // namespace kvfuzz::cpu
