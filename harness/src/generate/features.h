// The attention features of one layout (Layout::softcap, sinks, alibi, chunked_local), drawn
// only for an engine that declares at least one (EngineSupports): for every other engine no
// choice is drawn, so its scenarios are the same, choice for choice, as before features
// existed. About one scenario in three (kFeatureCaseOdds) has features; in it each declared
// feature is on with odds 1/2, so each is on in about one scenario in six, and with several
// engines of which some declare none, those skip only the featured third. A feature is
// forced on by GeneratorFilters::features; its values come from small lists that
// reach the regimes kernels get wrong: caps that saturate tanh and Gemma's 30 and 50, sinks
// that outweigh or vanish beside the keys, the standard ALiBi slopes or a few of one's own,
// chunks on, one below and one above pages and the engine's edges.
#pragma once

#include "generate/bounds.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// A scenario has features when rarely(c, kFeatureCaseOdds); then each declared feature is on
// when a fair coin says so.
inline constexpr int kFeatureCaseOdds = 3;

// Sets the features of `l` (its heads, page size and window already drawn).
void pick_features(ChoiceSource& c, const Bounds& b, Layout& l);

// MLA's value read from its key (Layout::value_from_key), drawn last, and only for an engine
// that declares it: about one scenario in kValueFromKeyCaseOdds, over the key's format as
// drawn (none, fp8 or a ggml block format: a latent cache in it; V's format is dropped: the
// value is read from the key's cache), with a value_dim below head_dim (the latent beside a
// part of the key the value does not read), whole blocks of a block format's row, unless the
// engine takes one head size; explicit tokens then lose their v (read from k). With RoPE, only for
// an engine that also declares rope_dims: MLA's decoupled RoPE part, the key's last rope_dims
// elements (2 to head_dim - 2, drawn), the value at most the elements before them.
// GeneratorFilters::features forces it on, and RoPE off unless rope_dims is declared.
inline constexpr int kValueFromKeyCaseOdds = 4;
void pick_value_from_key(ChoiceSource& c, const Bounds& b, Scenario& s);

// RoPE's interleaved pairs (Layout::rope_style), drawn after every other choice, and only for
// an engine that declares them: about one scenario with RoPE in kRopeInterleavedCaseOdds.
// Returns whether it switched them on. GeneratorFilters::features forces them on (RoPE is
// then on from the layout's first choice: generate/layout.cpp).
inline constexpr int kRopeInterleavedCaseOdds = 3;
bool pick_rope_style(ChoiceSource& c, const Bounds& b, Scenario& s);

// RoPE on the head's last Layout::rope_dims elements only, drawn after that, and only for an
// engine that declares it: about one scenario with RoPE (and a head of 4 or more) in
// kRopeDimsCaseOdds, 2 to head_dim - 2 elements (MLA's layouts get theirs from
// pick_value_from_key). Returns whether it set them. GeneratorFilters::features forces it on
// (RoPE on and a head of at least 4 from the layout's first choices: generate/layout.cpp).
inline constexpr int kRopeDimsCaseOdds = 4;
bool pick_rope_dims(ChoiceSource& c, const Bounds& b, Scenario& s);

}  // namespace kvfuzz
