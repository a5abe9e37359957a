// The layout of one scenario: heads (MHA, GQA, MQA), RoPE, head_dim and value_dim, page
// size, storage dtype, sliding window and softmax scale, each simple first (MHA with one
// head, no RoPE, head_dim 1, one page of 16, f32, no window, the default scale) and then
// aimed at what breaks kernels: grouped heads, dims that are not multiples of the vector
// width, pages of 1 to 3 tokens that every chunk crosses, windows on, one below and one
// above page, tile, partition and split-threshold edges (and, for long contexts, far from
// position 0). Fixed arity: every candidate is drawn whichever one is taken.
#pragma once

#include "generate/bounds.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Within the bounds: the engine's dtypes, head_dim multiple and value_dim rule, and the
// filters' RoPE and window wishes.
Layout pick_layout(ChoiceSource& c, const Bounds& b);

}  // namespace kvfuzz
