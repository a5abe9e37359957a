#include "fuzz_sizes.h"

#include <algorithm>

namespace kvfuzz::fuzz {

namespace {

// `floor`, one `notch` more every `bytes_per_notch` bytes, never above `most` (the
// option's own value, which wins even when it is below the floor).
int grown(int most, int floor, size_t size, int bytes_per_notch, int notch) {
  const auto notches = static_cast<int>(std::min(size, kFullSizeBytes)) / bytes_per_notch;
  return std::min(most, floor + notches * notch);
}

}  // namespace

GeneratorOptions input_sized_options(GeneratorOptions o, size_t size) {
  if (size >= kFullSizeBytes) return o;
  // Contexts reach one partition past the split threshold even at 0 bytes: the split path
  // over two partitions, and every page and tile edge below it.
  const int context_floor =
      std::max(1, o.edges.split_threshold) + std::max(1, o.edges.partition_keys) + 1;
  o.max_sequences = grown(o.max_sequences, 2, size, 16, 1);  // 2 .. 4 at 32 bytes
  o.max_ops = grown(o.max_ops, 4, size, 4, 1);               // 4 .. 12 at 32 bytes
  o.max_q_heads = grown(o.max_q_heads, 4, size, 4, 1);       // 4 .. 16 at 48 bytes
  const int dim_floor = std::max(8, o.supports.head_dim_multiple);
  o.max_head_dim = grown(o.max_head_dim, dim_floor, size, 1, 2);  // 8 .. 128 at 60 bytes
  o.max_epoch_tokens = grown(o.max_epoch_tokens, context_floor, size, 1, 2);  // 49 .. 160
  o.typical_q_heads = std::min(o.typical_q_heads, o.max_q_heads);
  o.typical_head_dim = std::min(o.typical_head_dim, o.max_head_dim);
  o.typical_epoch_tokens = std::min(o.typical_epoch_tokens, o.max_epoch_tokens);
  if (o.model) {
    o.model->max_layers = grown(o.model->max_layers, 1, size, 16, 1);  // 1 .. 3 at 32 bytes
    o.model->max_width = grown(o.model->max_width, 16, size, 1, 1);    // 16 .. 64 at 48 bytes
    o.model->max_ffn = grown(o.model->max_ffn, 32, size, 1, 2);        // 32 .. 128 at 48 bytes
  }
  return o;
}

int64_t attention_cost(const Scenario& s) {
  const int64_t width = int64_t{s.layout.q_heads} * (s.layout.head_dim + s.layout.value_dim);
  int64_t cost = 0;
  for_each_chunk(s, [&](const PlacedChunk& c) {
    const auto n = static_cast<int64_t>(c.tokens->size());
    cost += n * (c.start + n) * width;
  });
  return cost;
}

}  // namespace kvfuzz::fuzz
