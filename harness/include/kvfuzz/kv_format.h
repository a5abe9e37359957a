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
// A row goes through round_trip_row() to become what the reference attends over: an honest
// quantized cache is judged against its own quantized values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kvfuzz {

enum class KvQuant { none, fp8_e4m3fn, fp8_e5m2, q8_0, q4_0, q4_1, q5_0, q5_1 };

// Every quantized format, in the order --kv-format lists and the generator draws them.
inline constexpr KvQuant kQuantizedFormats[] = {
    KvQuant::fp8_e4m3fn, KvQuant::fp8_e5m2, KvQuant::q8_0, KvQuant::q4_0,
    KvQuant::q4_1,       KvQuant::q5_0,     KvQuant::q5_1};

std::string_view kv_quant_name(KvQuant quant);  // "none", "fp8_e4m3fn", "q4_0", ...
std::optional<KvQuant> parse_kv_quant(std::string_view name);

inline bool is_fp8(KvQuant quant) {
  return quant == KvQuant::fp8_e4m3fn || quant == KvQuant::fp8_e5m2;
}
inline bool is_ggml_block(KvQuant quant) {
  return quant != KvQuant::none && !is_fp8(quant);
}

// ggml's blocks hold this many elements; a row's length must be a multiple of it.
inline constexpr int kGgmlBlock = 32;

// How one of K or V is stored. `scale` is for fp8 only: empty (1), one value (per tensor)
// or one per kv head; each positive, finite and exact in f32.
struct KvFormat {
  KvQuant quant = KvQuant::none;
  std::vector<double> scale;
  bool quantized() const { return quant != KvQuant::none; }
  float scale_of(int kv_head) const;
  bool operator==(const KvFormat&) const = default;
};

// Bytes of one stored row of n elements (fp8: n; a block format: n / 32 blocks).
size_t row_bytes(KvQuant quant, int n);

// The OCP fp8 conversions: round to nearest even, saturating (NaN stays NaN).
uint8_t f32_to_fp8(float x, KvQuant quant);
float fp8_to_f32(uint8_t bits, KvQuant quant);
// The largest finite fp8 value (448 or 57344).
float fp8_max(KvQuant quant);

// One row of kv head `kv_head`, n elements, stored into row_bytes(quant, n) bytes and read
// back. A block format needs n % 32 == 0.
void encode_row(const KvFormat& format, int kv_head, const float* x, int n, uint8_t* out);
void decode_row(const KvFormat& format, int kv_head, const uint8_t* in, int n, float* out);
// decode_row(encode_row(x)): what a cache of this format holds for x.
void round_trip_row(const KvFormat& format, int kv_head, const float* x, int n, float* out);

}  // namespace kvfuzz
