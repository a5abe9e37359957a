// The shrinker's size order: what "smaller" means when the search compares a candidate
// with the best scenario so far (internal to harness/src/shrink/).
#pragma once

#include <compare>
#include <cstdint>
#include <utility>

#include "kvfuzz/scenario.h"

namespace kvfuzz::shrinking {

// The size of a scenario. The defaulted <=> compares the fields in the order they are
// declared, so that order is the shrink policy: a candidate is smaller when the first field
// that differs is smaller, whatever the later fields do. The order runs from what makes a
// fixture long to read to the finest detail of one number, so that the search spends a
// larger value of a later field to buy any reduction of an earlier one: first the program
// (what a reader walks through op by op), then the model (0 without one), then the
// attention layout, the page placement, the token table, and last the token values.
struct Measure {
  // The program.
  int expect_rows = 0;     // hand-derived rows: a shrunk fixture has none
  int program_tokens = 0;  // tokens fed, over every op
  int ops = 0;
  int sequences = 0;
  int chunks = 0;              // appends and step chunks
  int steps = 0;               // a one-chunk step is simpler as an append
  int epoch_ops = 0;           // truncates and forks (a reset is simpler)
  int64_t truncate_keeps = 0;  // sum of the truncates' `keep`

  // The model (all 0 without one).
  int model_layers = 0;
  int model_width = 0;
  int model_ffn = 0;
  int model_vocab = 0;
  int words_used = 0;               // distinct vocabulary ids in the program
  bool words_out_of_order = false;  // ids not numbered 0, 1, 2, ... in order of first use

  // The layout.
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int value_dim = 0;
  bool rope = false;
  bool rope_interleaved = false;
  bool rope_dims = false;  // RoPE on part of the head only
  bool window = false;
  bool scale = false;
  bool dtype_not_f32 = false;
  // The attention features and quantized KV formats: each one off, then fewer scales and
  // nonzero sinks and slopes.
  bool softcap = false;
  bool sinks = false;
  bool alibi = false;
  bool chunked_local = false;
  bool value_from_key = false;
  int quantized_kv = 0;    // K and V stored quantized (0, 1 or 2)
  int kv_scales = 0;       // fp8 scales given (a per-tensor scale of 1 is none)
  int kv_wide_groups = 0;  // affine formats whose group is wider than 32 (0, 1 or 2)
  int nonzero_feature_values = 0;

  // The placement.
  int page_order = 0;  // identity 0, reversed 1, an explicit list 2
  bool pool_pages = false;
  bool poison_not_nan = false;
  bool threads_not_thread_order = false;  // a thread schedule other than thread order
  int page_class = 0;                     // page_key(): one page per sequence first
  int page_rank = 0;

  // The token table.
  bool generated_tokens = false;  // explicit values read more easily than a seed
  int table_size = 0;
  bool ids_out_of_order = false;  // ids not numbered in order of first use

  // The token values (explicit tables only).
  int nonzero_values = 0;
  int fractional_values = 0;
  double magnitude = 0;  // sum of |x|
  int negative_values = 0;

  auto operator<=>(const Measure&) const = default;
};

Measure measure(const Scenario& scenario);

// How simple a page size is for a program whose longest epoch has `context` tokens, as a
// (class, rank) pair compared lexicographically: one page per sequence is simplest (the
// default 16 first, then smaller), then smaller pages.
std::pair<int, int> page_key(int page_size, int context);

}  // namespace kvfuzz::shrinking
