// The bounds of one scenario (bounds.h): sizes clamped far inside limits.h, narrowed by the
// engine's supports and the filters; typical sizes, now and then the maxima; long contexts
// few and long over a small layout.
#include "generate/bounds.h"

#include <algorithm>

#include "kvfuzz/limits.h"

namespace kvfuzz {

namespace {

int within(int value, int limit) {
  return limit > 0 ? std::min(value, limit) : value;
}

}  // namespace

// The most sequences a scenario may have: the options', the filter's, 2 for long contexts.
int most_sequences(const GeneratorOptions& o) {
  int most = within(std::clamp(o.max_sequences, 1, 8), o.filters.max_sequences);
  return o.long_context ? std::min(most, 2) : most;
}

// The most tokens of one (sequence, epoch): the sizes', the engine's and the filter's cap.
int most_context(const GeneratorOptions& o) {
  // The engine's context and the filter's, whichever is tighter (0: no cap).
  const int cap = o.supports.max_context > 0 ? within(o.supports.max_context, o.filters.max_context)
                                             : o.filters.max_context;
  if (o.long_context) {
    return within(std::clamp(o.long_context->max_tokens, 1, limits::kMaxEpochTokens), cap);
  }
  return within(std::clamp(o.max_epoch_tokens, 1, 1024), cap);
}

// The largest head_dim: the options', the engine's, 16 for long contexts (32 when a filter
// asks for a ggml block or affine format, whose rows are at least 32 long).
int most_head_dim(const GeneratorOptions& o) {
  const int most = within(std::clamp(o.max_head_dim, 1, 128), o.supports.max_head_dim);
  const auto& formats = o.filters.kv_formats;
  const bool blocks = std::any_of(formats.begin(), formats.end(),
                                  [](KvQuant q) { return is_ggml_block(q) || is_affine(q); });
  return o.long_context ? std::min(most, blocks ? kGgmlBlock : 16) : most;
}

Bounds pick_bounds(ChoiceSource& c, const GeneratorOptions& o) {
  Bounds b;
  b.sequences = most_sequences(o);
  b.steps = std::clamp(o.max_ops, 1, 256);
  const EngineSupports& can = o.supports;
  b.supports = can;
  b.supports.dtypes = filtered_dtypes(o);
  b.filters = o.filters;
  // An engine that always rotates (rope_required) or has no windows narrows the filters as
  // a --rope on or --window off would: the choices are drawn either way.
  if (can.rope_required) b.filters.rope = OnOff::on;
  if (!can.windows) b.filters.window = OnOff::off;
  // No attention features at model level (validate() refuses them there).
  if (o.model) {
    b.model_kv_blocks = can.kv_ggml_blocks;
    b.model_kv_affine = can.kv_affine;
    for (bool EngineSupports::*feature : kFeatureSupports) b.supports.*feature = false;
  }
  b.max_q_heads = within(std::clamp(o.max_q_heads, 1, 32), can.max_q_heads);
  const int max_epoch = most_context(o);
  const int max_dim = most_head_dim(o);
  b.truncate = o.truncate && o.filters.ops.truncate;
  b.fork = o.fork && o.filters.ops.fork;
  b.edges = {std::max(1, o.edges.tile_keys), std::max(1, o.edges.split_threshold),
             std::max(1, o.edges.partition_keys)};
  b.large = rarely(c, o.large_one_in);
  b.epoch_tokens = b.large ? max_epoch : std::clamp(o.typical_epoch_tokens, 1, max_epoch);
  b.q_heads = b.large ? b.max_q_heads : std::clamp(o.typical_q_heads, 1, b.max_q_heads);
  b.head_dim = b.large ? max_dim : std::clamp(o.typical_head_dim, 1, max_dim);
  b.max_head_dim = max_dim;
  if (o.long_context) {
    // Few, long sequences over a small layout (generator.h, LongContextOptions): at most two
    // sequences and head_dim 16 come from most_sequences and most_head_dim.
    b.long_context = true;
    b.steps = std::min(b.steps, 8);
    b.epoch_tokens = max_epoch;
    b.max_q_heads = std::min(b.max_q_heads, 4);
    b.q_heads = std::min(b.q_heads, b.max_q_heads);
  }
  // RoPE needs head_dim 2 or more: a filter that wants it on lifts a typical bound of 1.
  if (b.filters.rope == OnOff::on) b.head_dim = std::max(b.head_dim, std::min(2, max_dim));
  // A filter's minimum context lifts a typical context below it.
  b.epoch_tokens = std::max(b.epoch_tokens, std::min(o.filters.min_context, max_epoch));
  return b;
}

}  // namespace kvfuzz
