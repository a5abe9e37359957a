// The orchestration stage: what every door (the kvfuzz command, the Python package, the
// engine tests, the fuzz targets and the property suites) does between an engine's
// declarations and the judge, written once so that the doors are wiring and printing.
//
//   declarations -> generator_options_from_declarations -> generate -> judge
#pragma once

#include <span>
#include <stdexcept>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {

// One engine's declarations (probe_declarations) with the name messages use.
struct NamedDeclarations {
  std::string name;
  EngineDeclarations declared;
};

// What a door narrows beyond the declarations (0: the generator's own limit).
struct SizeCaps {
  // Above the generator's maximum epoch size: the long-context mode (LongContextOptions),
  // whose contexts reach this many tokens.
  int max_tokens = 0;
  int max_head_dim = 0;
  int max_q_heads = 0;
  int max_sequences = 0;
  int max_ops = 0;
  // Judge every engine at model level (`--model`). Engines that all run whole models get
  // model scenarios without it.
  bool model = false;
};

// The declarations admit no scenario (no storage dtype, a head_dim multiple above every
// drawable head_dim) or the engines cannot share one (whole-model engines beside attention
// engines without `model`). The message is one line that names the engines or the cap; a
// door prefixes its flag or argument.
class DeclarationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What every engine supports. When the engines share no storage dtype (flash-bf16 beside
// flash-f16), the union of their dtypes instead: each engine then skips the cases outside
// its own supports (unjudgeable).
EngineSupports common_supports(std::span<const NamedDeclarations> engines);

// The generator's options for a run whose every case serves all `engines`: only the
// optional operations all of them announce, within what all of them support, model
// scenarios where they run whole models (or caps.model), sizes within `caps`. `base`
// carries what the door chose itself (engine edges, filters are applied after). Throws
// DeclarationError.
GeneratorOptions generator_options_from_declarations(std::span<const NamedDeclarations> engines,
                                                     const SizeCaps& caps = {},
                                                     GeneratorOptions base = {});

}  // namespace kvfuzz
