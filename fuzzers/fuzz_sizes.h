// Size follows the input: the generator's size bounds for a libFuzzer input of `size`
// bytes. libFuzzer tries short inputs first and grows them only when that pays (its
// -len_control), so a short input must be a cheap scenario: past the input's bytes the
// choices come from a PRNG (fuzz_choices.h), and without this every input, even an empty
// one, would expand to a full-size scenario. The bounds grow with the input, one notch
// every few bytes, and reach the generator's defaults (GeneratorOptions) at
// kFullSizeBytes. Every bound keeps a floor at which each feature stays reachable, so a
// short input can still reach every cache-state event (tests/fuzzers): two sequences
// (batches, forks), four q heads (GQA with two kv heads), head_dim 8 (RoPE), and contexts
// one partition past the engine's split threshold (the split path with two partitions).
// Only sizes change: the choices and their order are the generator's, so an input's bytes
// mean the same at every length.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvfuzz/generator.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::fuzz {

// From this many bytes on an input gets `options` as they are.
inline constexpr size_t kFullSizeBytes = 64;

// `options` with its sizes (sequences, ops, epoch tokens, head_dim, q heads, and the model's
// layers and widths when set) bounded by the input's length; never above `options`' own.
GeneratorOptions input_sized_options(GeneratorOptions options, size_t size);

// A scenario's attention work: rows x keys seen x q heads x (head_dim + value_dim). The fuzz
// session bounds decoded fixtures by it; tests/fuzzers measures sizes by it.
int64_t attention_cost(const Scenario& s);

}  // namespace kvfuzz::fuzz
