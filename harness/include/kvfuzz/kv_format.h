// Quantized KV cache formats (docs/fixture-format.md, "Quantized KV caches"): how a cache
// stores one head's row of K or V, bit for bit, and what it reads back.
//
// fp8 (e4m3fn, e5m2; the OCP FP8 formats): each element x of a row of kv head g is stored
// as fp8(x / s_g) and read back as fp8 * s_g, both in f32 (x / s_g correctly rounded, the
// conversion round to nearest even, saturating at the largest finite value: 448 and 57344,
// as vLLM's and torch's scaled conversions clamp). s_g is the format's scale, one for every
// head or one per kv head.
//
// ggml's blocks (q8_0, q4_0, q4_1, q5_0, q5_1): a row is cut into blocks of 32 elements,
// each stored as ggml's quantize_row_*_ref (ggml-quants.c) stores it, f16 scale (and
// minimum) first, and read back as dequantize_row_* reads it. The gguf Python package's
// quantizers give the same bytes (tests/python/test_kv_format.py checks both this and fp8
// against ml_dtypes).
//
// Affine groups (affine2, affine4, affine8): a row is cut into groups of `group` elements
// (32, 64 or 128), each stored as MLX's affine quantizer (mlx/backend/cpu/quantized.cpp,
// `quantize`; mlx-lm's QuantizedKVCache) stores it: an f32 scale and bias from the group's
// extremes, the extreme of larger magnitude snapped to the grid as the bias, the quants
// clamp(rint((x - bias) / scale), 0, 2^bits - 1), and the scale and bias stored in the
// layout's dtype; read back as scale * q + bias in f32, two roundings (MLX's quantized_matmul
// on the CPU; tests/adapters/test_mlx_inprocess.py holds it against mx.quantize bit for bit).
//
// Per-channel keys (channel_u8, channel_u4; K only), as OpenVINO's CPU plugin
// (KEY_CACHE_QUANT_MODE BY_CHANNEL) and KIVI store keys: a stream's keys are cut into groups
// of `group` consecutive positions (group g holds positions [g G, g G + G)), and a group,
// once the cache holds all G of its keys, is quantized channel by channel: for each element
// d of the head, lo = min and hi = max over the group's G keys (the keys as stored in the
// layout's dtype, after RoPE), scale = (hi - lo) / (2^bits - 1) in f32, each quant
// clamp(nearbyint((x - lo) / scale), 0, 2^bits - 1) (the subtraction and division in f32; a
// scale of 0 gives quants 0), read back as q * scale + lo in f32 (two roundings). A key
// whose group the cache does not hold whole yet reads back as stored, in the layout's
// dtype: the query at p sees key j quantized exactly when (g + 1) G <= p + 1. quantize_group
// below is the definition. What depends on other keys is not a row's: encode_row and
// decode_row refuse these formats, and round_trip_row and round_trip_reach leave their rows
// as given.
//
// A row goes through round_trip_row() to become what the reference attends over: an honest
// quantized cache is judged against its own quantized values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvfuzz/dtype.h"

namespace kvfuzz {

enum class KvQuant {
  none,
  fp8_e4m3fn,
  fp8_e5m2,
  q8_0,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  affine2,
  affine4,
  affine8,
  channel_u8,
  channel_u4
};

// Every quantized format, in the order --kv-format lists them (the generator draws the fp8
// and block formats in this order, the affine ones apart: generate/kv_formats.h).
inline constexpr KvQuant kQuantizedFormats[] = {
    KvQuant::fp8_e4m3fn, KvQuant::fp8_e5m2, KvQuant::q8_0,       KvQuant::q4_0,
    KvQuant::q4_1,       KvQuant::q5_0,     KvQuant::q5_1,       KvQuant::affine2,
    KvQuant::affine4,    KvQuant::affine8,  KvQuant::channel_u8, KvQuant::channel_u4};

std::string_view kv_quant_name(KvQuant quant);  // "none", "fp8_e4m3fn", "q4_0", ...
std::optional<KvQuant> parse_kv_quant(std::string_view name);

inline bool is_fp8(KvQuant quant) {
  return quant == KvQuant::fp8_e4m3fn || quant == KvQuant::fp8_e5m2;
}
inline bool is_affine(KvQuant quant) {
  return quant == KvQuant::affine2 || quant == KvQuant::affine4 || quant == KvQuant::affine8;
}
inline bool is_channel(KvQuant quant) {
  return quant == KvQuant::channel_u8 || quant == KvQuant::channel_u4;
}
inline bool is_ggml_block(KvQuant quant) {
  return quant != KvQuant::none && !is_fp8(quant) && !is_affine(quant) && !is_channel(quant);
}
// Whether a format has a group (the affine formats: elements of a row; the per-channel
// ones: positions of a stream).
inline bool has_group(KvQuant quant) {
  return is_affine(quant) || is_channel(quant);
}
// An affine format's bits per quant (2, 4 or 8); a per-channel one's (8 or 4).
int affine_bits(KvQuant quant);

// ggml's blocks hold this many elements; a row's length must be a multiple of it.
inline constexpr int kGgmlBlock = 32;
// The affine formats' group sizes (MLX's), and the one a fixture that names none means
// (mlx.core.quantize's and mlx-lm's QuantizedKVCache's default).
inline constexpr int kAffineGroups[] = {32, 64, 128};
inline constexpr int kDefaultAffineGroup = 64;
// The per-channel formats' groups of positions (OpenVINO's PagedAttention quantizes a block
// of 32 tokens by channel; KIVI's default group is 32), and the one a fixture that names
// none means.
inline constexpr int kChannelGroups[] = {16, 32, 64, 128};
inline constexpr int kDefaultChannelGroup = 32;
// The groups a format may have: kAffineGroups, kChannelGroups, or none.
inline std::span<const int> format_groups(KvQuant quant) {
  if (is_affine(quant)) return kAffineGroups;
  if (is_channel(quant)) return kChannelGroups;
  return {};
}

// How one of K or V is stored. `scale` is for fp8 only: empty (1), one value (per tensor)
// or one per kv head; each positive, finite and exact in f32. `group` is for the affine
// formats (one of kAffineGroups) and the per-channel ones (one of kChannelGroups), 0 for
// the others.
struct KvFormat {
  KvQuant quant = KvQuant::none;
  std::vector<double> scale;
  int group = 0;
  bool quantized() const { return quant != KvQuant::none; }
  float scale_of(int kv_head) const;
  bool operator==(const KvFormat&) const = default;
};

// One per-channel group quantized and read back (channel_u8, channel_u4; the definition
// above): x holds `count` keys of n elements each (key i at x + i n, as the cache holds them
// in the layout's dtype), out the same shape (out may be x).
void quantize_group(KvQuant quant, const float* x, int count, int n, float* out);

// What a row's length must be a multiple of: 32 for a block format, the group for an affine
// one, 1 for the others.
inline int row_multiple(const KvFormat& format) {
  if (is_ggml_block(format.quant)) return kGgmlBlock;
  return is_affine(format.quant) ? format.group : 1;
}

// Bytes of one stored row of n elements (fp8: n; a block format: n / 32 blocks; an affine
// format: n / group groups, each an f32 scale and bias, then its quants packed into
// little-endian 32-bit words, element k of a word in bits [k * bits, (k + 1) * bits), as
// MLX packs them).
size_t row_bytes(const KvFormat& format, int n);

// The OCP fp8 conversions: round to nearest even, saturating (NaN stays NaN).
uint8_t f32_to_fp8(float x, KvQuant quant);
float fp8_to_f32(uint8_t bits, KvQuant quant);
// The largest finite fp8 value (448 or 57344).
float fp8_max(KvQuant quant);

// One row of kv head `kv_head`, n elements, stored into row_bytes(format, n) bytes and read
// back. A block format needs n % 32 == 0, an affine one n % group == 0. `dtype` is the
// layout's: an affine group's scale and bias are rounded to it (the other formats ignore it).
void encode_row(const KvFormat& format, DType dtype, int kv_head, const float* x, int n,
                uint8_t* out);
void decode_row(const KvFormat& format, int kv_head, const uint8_t* in, int n, float* out);
// decode_row(encode_row(x)): what a cache of this format holds for x.
void round_trip_row(const KvFormat& format, DType dtype, int kv_head, const float* x, int n,
                    float* out);

// What a cache of this format may hold for a row when an engine's own arithmetic may have
// put each element anywhere in [lo[i], hi[i]] before storing it (RoPE's rounding: the
// reference's stored keys, judge/reference.cpp): each element reads back as something in
// [out_lo[i], out_hi[i]]. Exact for fp8 (element by element); for a block format, a block
// of one input gives its one output, and otherwise ranges by the encoder's monotone steps
// (kv_format.cpp, reach_block), wider than the true set but never narrower; an affine
// group the same, case by case where its edge snapping is not monotone (reach_affine).
void round_trip_reach(const KvFormat& format, DType dtype, int kv_head, const float* lo,
                      const float* hi, int n, float* out_lo, float* out_hi);

}  // namespace kvfuzz
