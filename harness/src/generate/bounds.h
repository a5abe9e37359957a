// The bounds of one scenario (generate_scenario's first piece): how many sequences, steps
// and tokens per (sequence, epoch), how many q heads and how large a head_dim it may reach.
// Most scenarios stay at the options' typical sizes (the property suites run many cases
// under ASan); about one in large_one_in may grow to the maxima. Long contexts
// (LongContextOptions) trade the layout for length here: at most two sequences, 4 q heads,
// head_dim 16 and 8 steps, each (sequence, epoch) up to max_tokens. The engine's supports
// and the filters narrow every bound, so that the later pieces only draw what both allow.
// One choice: whether the scenario is large.
#pragma once

#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {

// The sizes one scenario may reach. Options are clamped to sizes far inside limits.h.
struct Bounds {
  int sequences = 1;     // the most sequences (choices are drawn for this many)
  int steps = 1;         // the most program steps
  int epoch_tokens = 1;  // per (sequence, epoch)
  int q_heads = 1;       // MHA and MQA heads; GQA may reach max_q_heads
  int max_q_heads = 1;
  int head_dim = 1;
  int max_head_dim = 1;  // the most a piece may widen a head to (most_head_dim)
  bool large = false;
  bool long_context = false;  // GeneratorOptions::long_context
  bool truncate = true;       // the engine's optional operations and its edges (GeneratorOptions)
  bool fork = true;
  EngineEdges edges;
  EngineSupports supports;  // its dtypes narrowed by the filters (filtered_dtypes)
  // At model level, where supports has no features: the engine declares kv_ggml_blocks or
  // kv_affine, drawn last (pick_model_kv_formats).
  bool model_kv_blocks = false;
  bool model_kv_affine = false;
  GeneratorFilters filters;  // the rest of the filters, for the pieces that draw them
};

// The most sequences, tokens of one (sequence, epoch) and head_dim the options, the
// engine and the filters allow (filter_conflict checks the filters against them).
int most_sequences(const GeneratorOptions& o);
int most_context(const GeneratorOptions& o);
int most_head_dim(const GeneratorOptions& o);

// Typical sizes, now and then the options' maxima.
Bounds pick_bounds(ChoiceSource& c, const GeneratorOptions& o);

}  // namespace kvfuzz
