// The one scenario generator (DESIGN.md), written once against ChoiceSource. A PRNG drives
// it for `kvfuzz check`, RapidCheck drives it inside rc::gen::exec for the properties
// (integrated shrinking: choices shrink toward their lower bound), libFuzzer will drive it
// through FuzzedDataProvider. Every scenario it returns passes validate().
//
// It aims at the corners where cached-attention bugs live: chunks that start or end on,
// one before and one after a page boundary, a window edge and the flash engine's split
// threshold; runs of one-token decodes; batched steps over sequences with different
// cached lengths; MHA, GQA (groups 2..8 and beyond, not only powers of two) and MQA;
// head_dim 1..128; page sizes 1, 2, 3, 16 and others; identity, reversed, shuffled and
// interleaved page orders; every poison; RoPE and windows on and off; exact token data by
// default, wide dynamic range sometimes; resets of empty and non-empty sequences.
#pragma once

#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

struct GeneratorOptions {
  int max_sequences = 4;
  int max_ops = 12;
  int max_epoch_tokens = 160;  // enough to cross the flash split threshold and pages
  int max_head_dim = 128;
  int max_q_heads = 16;
};

Scenario generate_scenario(ChoiceSource& choices, const GeneratorOptions& options = {});

}  // namespace kvfuzz
