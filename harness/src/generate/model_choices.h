// The model of a model-level scenario (GeneratorOptions::model, Scenario::model): layers,
// width, ffn size, spare vocabulary ids and the weights' seed of the small transformer drawn
// around the attention, one layer and the smallest width first. Only drawn at model level:
// without the option no choice is drawn and attention scenarios stay as they are. The
// model's work per token bounds the program (program.cpp) far inside kMaxModelWork.
#pragma once

#include <cstdint>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// One layer and the smallest width first; ffn the width first (then 2x, 4x, any size up to
// the bound); no spare vocabulary ids first. The seed picks the weights: no value of it is
// simpler than another.
struct ModelChoices {
  int layers = 1;
  int width = 4;
  int ffn = 4;
  int spare_vocab = 0;
  uint64_t seed = 0;
};

ModelChoices pick_model(ChoiceSource& c, const ModelOptions& o);

// Multiply-adds of the model for one token with a vocabulary of `vocab`.
int64_t model_work_per_token(const ModelChoices& m, const Layout& l, int64_t vocab);

}  // namespace kvfuzz
