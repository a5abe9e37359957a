// The one scenario generator (generator.h), as small pieces in the style of RapidCheck's
// own generators: each piece builds one part of a scenario from a few choices.
//
// Two rules make the choices shrink well (RapidCheck's exec shrinks one choice at a time
// toward its lower bound, and replays every later choice from the same random stream):
//
//  * Simple at lo (choice_source.h, with the choice helpers that keep it), so a failure
//    shrinks toward the worked example's shape: one sequence, MHA with one head, head_dim
//    1, zero scores, f32, one page of 16, identity page order, NaN poison, no RoPE, no
//    window, few short appends. (All choices at lo give an empty program.)
//  * Fixed arity. A piece draws the same number of choices whichever way it goes (all the
//    candidates, then the one the selector names), so shrinking a selector, say a decode
//    run into an append, leaves every later choice where it was instead of shifting the
//    rest of the scenario. Choices whose number depends on the program (the program's
//    steps, a shuffled page list, explicit token values) come last.
//
//   generate_scenario (this file; the pieces, each in a file of its own)
//     filter_conflict    filters that cannot be met, before any choice (filters.cpp)
//     pick_bounds        typical sizes, now and then the options' maxima; long contexts
//                        few and long (bounds.h)
//     pick_layout        pick_heads, pick_rope, pick_head_dim, pick_page_size, pick_dtype,
//                        pick_window, pick_scale (layout.h)
//     pick_token_choices zero scores, distribution, seeds, sequential or repeated ids
//                        (token_data.h)
//     pick_placement     poison, spare pages, page order kind, a wide pool (integer_limits.h)
//                        (placement.h)
//     pick_model         (model level only) layers, width, ffn, spare vocabulary, seed
//                        (model_choices.h)
//     pick_program       steps: an append, a decode run, a batched step, resets, a
//                        truncate, a fork, a window run (windows_at_edges.h) (or none);
//                        each chunk length from
//                        pick_chunk_length, aimed at page, window and engine edges
//                        (GeneratorOptions::edges) by pick_edge (chunk_lengths.h); then now
//                        and then a batched decode run at split edges against the batch's
//                        longest row (split_edges.h) (program.h)
//     resolve_pages      identity, reversed, shuffled or interleaved page list
//                        (interleaved_pages.cpp); a wide pool, reversed, in their place
//                        (placement.h)
//     make_tokens        generated small-int / dyadic / uniform / wide, or explicit (at
//                        model level: GeneratedTokens{0, vocab}, ids are vocabulary ids)
//                        (token_data.h)
//     score spread       (score_spreads.h) now and then a scale that spreads scores across
//                        split partitions past f32's exp range (from the token seed)
//     pick_thread_schedule  (last; not at model level) the order the SIMT launcher runs a
//                        block's threads in (placement.h)
#include "kvfuzz/generator.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "generate/bounds.h"
#include "generate/features.h"
#include "generate/integer_limits.h"
#include "generate/kv_formats.h"
#include "generate/layout.h"
#include "generate/model_choices.h"
#include "generate/placement.h"
#include "generate/program.h"
#include "generate/score_spreads.h"
#include "generate/token_data.h"
#include "kvfuzz/limits.h"
#include "kvfuzz/prng.h"

namespace kvfuzz {

Scenario generate_scenario(ChoiceSource& c, const GeneratorOptions& options) {
  if (const auto conflict = filter_conflict(options)) {
    throw std::invalid_argument("generate_scenario: filters that cannot be met: " +
                                conflict->message);
  }
  Scenario s;
  s.name = "generated";
  s.provenance.source = "check";
  const Bounds bounds = pick_bounds(c, options);
  s.layout = pick_layout(c, bounds);
  s.sequences = c.pick_int(std::max(1, options.filters.min_sequences), bounds.sequences);
  const TokenChoices token_choices = pick_token_choices(c);
  const PlacementChoices placement_choices = pick_placement(c, options.model.has_value());
  // Only at model level: without the option no choice is drawn (the same scenarios).
  std::optional<ModelChoices> model;
  if (options.model) model = pick_model(c, *options.model);
  // From here on the number of choices depends on the program.
  TokenIds ids(token_choices);
  s.program = pick_program(c, bounds, s.layout, s.sequences, ids, model ? &*model : nullptr);
  s.placement = resolve_pages(c, placement_choices, s);
  if (model) {
    // The ids handed out are vocabulary ids (sequential: every token a new word; from a
    // small table: repeated words); the vocabulary holds them and the spare ids.
    const int vocab = std::min(ids.count() + model->spare_vocab, limits::kMaxModelVocab);
    s.model = ModelConfig{vocab, model->width, model->layers, model->ffn, model->seed};
    s.tokens = GeneratedTokens{0, vocab, Distribution::small_int, false};
  } else {
    s.tokens = make_tokens(c, token_choices, s.layout, ids.count());
  }
  // From the token seed, drawn already: a scenario without a score spread is as before. Not
  // for long contexts: their RoPE rows at thousands of positions would get bounds as large
  // as their values (unjudged rows).
  if (!options.long_context) {
    ScoreSpreadChoices spread = score_spread_from_seed(token_choices.seed);
    spread.bound_log2 = std::min(spread.bound_log2, options.max_score_spread_log2);
    apply_score_spread(spread, s);
  }
  // A wide pool at model level too, drawn last so that a model scenario without one is the
  // one it was before.
  if (model) apply_wide_pool(pick_wide_pool(c), s, s.placement);
  // The model's KV cache in ggml's blocks or affine groups (an engine that declares them),
  // after that: the same.
  if (model) pick_model_kv_formats(c, bounds, s);
  // The thread order of the CUDA engines' kernels on the SIMT launcher, drawn last (every
  // other choice as before); not at model level, whose scenarios stay as they were.
  if (!model) s.placement.threads = pick_thread_schedule(c);
  // MLA's value read from its key, drawn after everything else (the features' grid and every
  // other choice as before it came); model bounds declare no features, so nothing is drawn.
  // A block format's head may be widened for its RoPE part (below: its spread sized again).
  const int drawn_head_dim = s.layout.head_dim;
  pick_value_from_key(c, bounds, s);
  // MLX's affine KV groups, after that (generate/kv_formats.h): the same. A head widened to
  // the group gets its score spread sized again (generated tokens: explicit ones are padded
  // with zeros, which leaves every score as it was), so that the scores stay within the
  // spread's bound (f16's range for the largest).
  pick_affine_kv(c, bounds, s);
  // RoPE's interleaved pairs, after that: the same. Other pairs give other scores, so the
  // score spread is sized again for them, as for a widened head.
  const bool interleaved = pick_rope_style(c, bounds, s);
  // RoPE on part of the head, after that (MLA's part comes with its value, above): the same.
  pick_rope_dims(c, bounds, s);
  const bool other_rotation = interleaved || s.layout.rope_dims.has_value();
  if (auto* generated = std::get_if<GeneratedTokens>(&s.tokens);
      generated && (s.layout.head_dim != drawn_head_dim || other_rotation) &&
      !options.long_context) {
    ScoreSpreadChoices spread = score_spread_from_seed(generated->seed);
    spread.bound_log2 = std::min(spread.bound_log2, options.max_score_spread_log2);
    generated->qk_log2 = 0;
    apply_score_spread(spread, s);
  }
  // Keys quantized by channel, last of all (an engine that declares kv_channel): the same.
  pick_channel_kv(c, bounds, s);
  if (const auto error = validate(s)) {
    throw std::logic_error("generate_scenario built an invalid scenario: " + error->path +
                           ": expected " + error->message);
  }
  return s;
}

uint64_t case_seed(uint64_t run_seed, int index) {
  uint64_t state = run_seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1));
  return splitmix64(state);
}

}  // namespace kvfuzz
