// The quantized KV cache of one layout (Layout::k_format, v_format; kvfuzz/kv_format.h),
// drawn only for an engine that declares kv_fp8 or kv_ggml_blocks (EngineSupports): for
// every other engine no choice is drawn. About one scenario in four (kKvFormatCaseOdds)
// has one: K in one of the declared formats, V mostly in the same (now and then in another,
// or unquantized, as llama.cpp's --cache-type-k and -v are set apart). fp8 scales are
// powers of two, one per tensor or one per kv head, mostly not 1: a scale dropped on one
// path then shows, and x / s equals x * (1 / s), so an engine that multiplies by the
// inverse stores the same bits. A ggml block format needs rows of 32: the layout's
// head_dim (for K) or value_dim (for V) becomes 32 when the bounds allow it. Keys under
// RoPE are block-quantized as others (the reference models what the engine's rotation may
// do to a block: judge/reference.cpp, store_rotated).
// GeneratorFilters::kv_formats forces a format from its list on K and V.
//
// MLX's affine groups (affine2, affine4, affine8; EngineSupports::kv_affine) are drawn apart,
// after every other choice of the scenario (pick_affine_kv), so that a stream without them
// is the one it was before they came: about one scenario in four of those that could hold
// one (no other format, no MLA; RoPE or not) stores K and V in one affine format and group, as
// MLX's QuantizedKVCache stores both with one setting; head_dim and value_dim become the
// group when they are not multiples of it (explicit tokens padded with zeros).
#pragma once

#include "generate/bounds.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

inline constexpr int kKvFormatCaseOdds = 4;
inline constexpr int kAffineCaseOdds = 4;
inline constexpr int kChannelCaseOdds = 4;

// Sets the KV formats of `l` (its heads, dims and RoPE already drawn).
void pick_kv_formats(ChoiceSource& c, const Bounds& b, Layout& l);
// Sets an affine format on K and V of `s` (everything else drawn already). A filter that
// lists affine formats forces one as often as they are in its list: RoPE and MLA are then
// turned off, another format replaced, and a pool too wide for the new dims given up.
void pick_affine_kv(ChoiceSource& c, const Bounds& b, Scenario& s);
// At model level (Bounds::model_kv_blocks, model_kv_affine; no choice drawn otherwise), after
// every other choice: about one scenario in four (every one with a --kv-format filter)
// caches K in one of the declared formats: a ggml block format, V mostly in the same (now and
// then in another or unquantized), as llama.cpp's --cache-type-k and -v; or an affine one,
// V in the same format and group, as mlx-lm's QuantizedKVCache(group_size, bits). The
// scale is the model's own; head_dim and value_dim become the block or group when they are
// not multiples of it. Given up (the scenario as it was) where the wider model no longer
// fits the limits.
void pick_model_kv_formats(ChoiceSource& c, const Bounds& b, Scenario& s);
// Keys quantized by channel (channel_u8, channel_u4; EngineSupports::kv_channel; no choice
// drawn otherwise), after every other choice: about one attention scenario in four
// (kChannelCaseOdds) whose K has no other format and no MLA stores K so, in groups of 16,
// 32, 64 or 128 positions (the small ones first: a group the streams never fill quantizes
// nothing); the values keep what was drawn. A program whose truncates cut into a whole group
// (validate.cpp) takes the next larger group that it does not cut, or none. A --kv-format
// filter listing a per-channel format forces it as often as it is in the list (replacing K's
// other format).
void pick_channel_kv(ChoiceSource& c, const Bounds& b, Scenario& s);

}  // namespace kvfuzz
