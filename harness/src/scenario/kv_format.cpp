#include "kvfuzz/kv_format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "kvfuzz/dtype.h"

namespace kvfuzz {

namespace {

constexpr std::array<std::pair<KvQuant, std::string_view>, 11> kNames{{
    {KvQuant::none, "none"},
    {KvQuant::fp8_e4m3fn, "fp8_e4m3fn"},
    {KvQuant::fp8_e5m2, "fp8_e5m2"},
    {KvQuant::q8_0, "q8_0"},
    {KvQuant::q4_0, "q4_0"},
    {KvQuant::q4_1, "q4_1"},
    {KvQuant::q5_0, "q5_0"},
    {KvQuant::q5_1, "q5_1"},
    {KvQuant::affine2, "affine2"},
    {KvQuant::affine4, "affine4"},
    {KvQuant::affine8, "affine8"},
}};

// An fp8 format's shape: mantissa bits, exponent bias, the largest finite code, NaN's code.
struct Fp8Shape {
  int mantissa;
  int bias;
  uint8_t max_code;
  uint8_t nan_code;
};

Fp8Shape fp8_shape(KvQuant quant) {
  // e4m3fn: no infinities, S.1111.111 is NaN, so 448 = 1.75 * 2^8 is the largest.
  // e5m2: IEEE-like, S.11111.00 is Inf; 57344 = 1.75 * 2^15 is the largest finite.
  return quant == KvQuant::fp8_e4m3fn ? Fp8Shape{3, 7, 0x7E, 0x7F} : Fp8Shape{2, 15, 0x7B, 0x7E};
}

double decode_fp8(uint8_t bits, const Fp8Shape& f) {
  const int exponent_field = (bits & 0x7F) >> f.mantissa;
  const int mantissa = bits & ((1 << f.mantissa) - 1);
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  if ((bits & 0x7F) > f.max_code) {
    // Above the largest finite: e5m2's infinities (mantissa 0) and both formats' NaNs.
    if (f.mantissa == 2 && mantissa == 0) return sign * INFINITY;
    return NAN;
  }
  if (exponent_field == 0) return sign * std::ldexp(mantissa, 1 - f.bias - f.mantissa);
  return sign * std::ldexp((1 << f.mantissa) + mantissa, exponent_field - f.bias - f.mantissa);
}

// The block formats' layouts (ggml-common.h): f16 d (and m) first, then qh, then qs.
struct BlockShape {
  size_t bytes;
  bool has_min;    // q4_1, q5_1: x = d q + m
  bool fifth_bit;  // q5_0, q5_1: qh holds bit 4 of each q
};

BlockShape block_shape(KvQuant quant) {
  switch (quant) {
    case KvQuant::q8_0:
      return {34, false, false};
    case KvQuant::q4_0:
      return {18, false, false};
    case KvQuant::q4_1:
      return {20, true, false};
    case KvQuant::q5_0:
      return {22, false, true};
    case KvQuant::q5_1:
      return {24, true, true};
    default:
      return {0, false, false};
  }
}

void put_f16(uint8_t* out, float x) {
  const uint16_t bits = f32_to_f16(x);
  out[0] = static_cast<uint8_t>(bits & 0xFF);  // ggml writes its blocks little-endian
  out[1] = static_cast<uint8_t>(bits >> 8);
}

float get_f16(const uint8_t* in) {
  return f16_to_f32(static_cast<uint16_t>(in[0] | (in[1] << 8)));
}

// ggml's quantize_row_q8_0_ref for one block: d = amax / 127, q = roundf(x / d) (ties away
// from zero), with x / d computed as x * (1 / d) in f32.
void encode_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  for (int j = 0; j < kGgmlBlock; ++j) {
    const float scaled = x[j] * id;
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(scaled)));
  }
}

// q4_0 and q5_0: d = (the element of largest magnitude, with its sign) / -8 or -16, q =
// min(top, trunc(x / d + top / 2 + 0.5)); q4_1 and q5_1: d = (max - min) / top, m = min,
// q = trunc((x - m) / d + 0.5) (q5_1 unclamped, as ggml). The 32 q of a block are packed
// with element j in the low nibble and element j + 16 in the high nibble of byte j, and
// (5-bit formats) bit 4 of element j in bit j of qh.
void encode_low_bits(KvQuant quant, const float* x, uint8_t* out) {
  const BlockShape shape = block_shape(quant);
  const int top = shape.fifth_bit ? 31 : 15;
  std::array<uint8_t, kGgmlBlock> q{};
  float d = 0, id = 0, min = 0;
  if (!shape.has_min) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kGgmlBlock; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    d = max / (shape.fifth_bit ? -16.0f : -8.0f);
    id = d != 0.0f ? 1.0f / d : 0.0f;
    const float offset = shape.fifth_bit ? 16.5f : 8.5f;
    for (int j = 0; j < kGgmlBlock; ++j) {
      const float scaled = x[j] * id;
      const auto truncated = static_cast<int8_t>(scaled + offset);
      q[static_cast<size_t>(j)] = static_cast<uint8_t>(std::min<int>(top, truncated));
    }
  } else {
    min = x[0];
    float max = x[0];
    for (int j = 0; j < kGgmlBlock; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    d = (max - min) / static_cast<float>(top);
    id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kGgmlBlock; ++j) {
      const float scaled = (x[j] - min) * id;
      const auto truncated = static_cast<uint8_t>(scaled + 0.5f);
      q[static_cast<size_t>(j)] =
          shape.fifth_bit ? truncated : static_cast<uint8_t>(std::min<int>(top, truncated));
    }
  }
  uint8_t* at = out;
  put_f16(at, d);
  at += 2;
  if (shape.has_min) {
    put_f16(at, min);
    at += 2;
  }
  if (shape.fifth_bit) {
    uint32_t qh = 0;
    for (int j = 0; j < kGgmlBlock; ++j) {
      qh |= static_cast<uint32_t>((q[static_cast<size_t>(j)] >> 4) & 1u) << j;
    }
    for (int b = 0; b < 4; ++b) at[b] = static_cast<uint8_t>(qh >> (8 * b));
    at += 4;
  }
  constexpr int half = kGgmlBlock / 2;
  for (int j = 0; j < half; ++j) {
    at[j] = static_cast<uint8_t>((q[static_cast<size_t>(j)] & 0x0F) |
                                 ((q[static_cast<size_t>(j + half)] & 0x0F) << 4));
  }
}

// dequantize_row_*: x = q d (q8_0), (q - 8) d, (q - 16) d, or q d + m, in f32.
void decode_block(KvQuant quant, const uint8_t* in, float* out) {
  const float d = get_f16(in);
  if (quant == KvQuant::q8_0) {
    for (int j = 0; j < kGgmlBlock; ++j)
      out[j] = static_cast<float>(static_cast<int8_t>(in[2 + j])) * d;
    return;
  }
  const BlockShape shape = block_shape(quant);
  const uint8_t* at = in + 2;
  float m = 0;
  if (shape.has_min) {
    m = get_f16(at);
    at += 2;
  }
  uint32_t qh = 0;
  if (shape.fifth_bit) {
    for (int b = 0; b < 4; ++b) qh |= static_cast<uint32_t>(at[b]) << (8 * b);
    at += 4;
  }
  constexpr int half = kGgmlBlock / 2;
  const int zero = shape.has_min ? 0 : (shape.fifth_bit ? 16 : 8);
  for (int j = 0; j < kGgmlBlock; ++j) {
    const uint8_t byte = at[j % half];
    int q = j < half ? (byte & 0x0F) : (byte >> 4);
    if (shape.fifth_bit) q |= static_cast<int>((qh >> j) & 1u) << 4;
    const float value = static_cast<float>(q - zero) * d;
    out[j] = shape.has_min ? value + m : value;
  }
}

// An affine group's stored bytes: f32 scale, f32 bias, then the packed quants.
constexpr size_t kAffineHeader = 8;

size_t affine_group_bytes(const KvFormat& format) {
  return kAffineHeader + static_cast<size_t>(format.group * affine_bits(format.quant) / 8);
}

void put_f32(uint8_t* out, float x) {
  const auto bits = std::bit_cast<uint32_t>(x);
  for (int b = 0; b < 4; ++b) out[b] = static_cast<uint8_t>(bits >> (8 * b));
}

float get_f32(const uint8_t* in) {
  uint32_t bits = 0;
  for (int b = 0; b < 4; ++b) bits |= static_cast<uint32_t>(in[b]) << (8 * b);
  return std::bit_cast<float>(bits);
}

// MLX's `quantize` (mlx/backend/cpu/quantized.cpp) for one group, in its f32 arithmetic: the
// scale (max - min) / (2^bits - 1), at least 1e-7, signed towards the extreme of larger
// magnitude (the edge); the edge snapped to the grid, q0 = rint(edge / scale), and when q0
// != 0 the scale becomes edge / q0 and the bias the edge (else the bias is 0); each quant
// clamp(rint((x - bias) / scale), 0, 2^bits - 1) with that unrounded scale. The scale and
// bias are then stored in the layout's dtype, as MLX stores them in its input's.
void encode_affine(const KvFormat& format, DType dtype, const float* x, uint8_t* out) {
  const int bits = affine_bits(format.quant);
  const auto n_bins = static_cast<float>((1 << bits) - 1);
  constexpr float kEps = 1e-7f;
  float w_min = INFINITY, w_max = -INFINITY;
  for (int j = 0; j < format.group; ++j) {
    w_max = std::max(w_max, x[j]);
    w_min = std::min(w_min, x[j]);
  }
  const bool mask = std::fabs(w_min) > std::fabs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, kEps);
  scale = mask ? scale : -scale;
  const float edge = mask ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  put_f32(out, round_to_dtype(scale, dtype));
  put_f32(out + 4, round_to_dtype(bias, dtype));
  uint8_t* words = out + kAffineHeader;
  std::fill_n(words, format.group * bits / 8, uint8_t{0});
  for (int j = 0; j < format.group; ++j) {
    const float q = std::min(std::max(std::rint((x[j] - bias) / scale), 0.0f), n_bins);
    const auto code = static_cast<uint32_t>(q);
    const int bit = j * bits;  // words are little-endian: bit k of the row is bit k % 8 of
    words[bit / 8] |= static_cast<uint8_t>(code << (bit % 8));  // byte k / 8
  }
}

// MLX's quantized_matmul reads each element as scale * q + bias in f32, the product rounded
// before the sum (its CPU kernels on x86: base_simd, no fused multiply-add).
void decode_affine(const KvFormat& format, const uint8_t* in, float* out) {
  const int bits = affine_bits(format.quant);
  const float scale = get_f32(in);
  const float bias = get_f32(in + 4);
  const uint8_t* words = in + kAffineHeader;
  const uint32_t mask = (1u << bits) - 1;
  for (int j = 0; j < format.group; ++j) {
    const int bit = j * bits;
    const auto q = static_cast<float>((words[bit / 8] >> (bit % 8)) & mask);
    const float product = scale * q;
    out[j] = product + bias;
  }
}

}  // namespace

int affine_bits(KvQuant quant) {
  switch (quant) {
    case KvQuant::affine2:
      return 2;
    case KvQuant::affine4:
      return 4;
    case KvQuant::affine8:
      return 8;
    default:
      return 0;
  }
}

std::string_view kv_quant_name(KvQuant quant) {
  for (const auto& [q, name] : kNames) {
    if (q == quant) return name;
  }
  return "none";
}

std::optional<KvQuant> parse_kv_quant(std::string_view name) {
  for (const auto& [q, n] : kNames) {
    if (n == name) return q;
  }
  return std::nullopt;
}

float KvFormat::scale_of(int kv_head) const {
  if (scale.empty()) return 1.0f;
  if (scale.size() == 1) return static_cast<float>(scale[0]);
  return static_cast<float>(scale[static_cast<size_t>(kv_head)]);
}

size_t row_bytes(const KvFormat& format, int n) {
  const KvQuant quant = format.quant;
  if (quant == KvQuant::none) return 0;
  if (is_fp8(quant)) return static_cast<size_t>(n);
  if (is_affine(quant)) return static_cast<size_t>(n / format.group) * affine_group_bytes(format);
  return static_cast<size_t>(n / kGgmlBlock) * block_shape(quant).bytes;
}

float fp8_max(KvQuant quant) {
  return static_cast<float>(decode_fp8(fp8_shape(quant).max_code, fp8_shape(quant)));
}

uint8_t f32_to_fp8(float x, KvQuant quant) {
  const Fp8Shape f = fp8_shape(quant);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | f.nan_code);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= decode_fp8(f.max_code, f)) return static_cast<uint8_t>(sign | f.max_code);
  // The quantum of a's binade (the subnormals' below the smallest normal), a / quantum
  // rounded to nearest even (exact: both are powers of two apart from a's bits).
  const int min_exponent = 1 - f.bias;
  int exponent = std::max(min_exponent, std::ilogb(a == 0 ? 1.0 : a));
  if (a == 0) return sign;
  const double quantum = std::ldexp(1.0, exponent - f.mantissa);
  const double rounded = std::nearbyint(a / quantum) * quantum;
  if (rounded == 0) return sign;
  exponent = std::max(min_exponent, std::ilogb(rounded));  // rounding may reach the next binade
  const bool normal = rounded >= std::ldexp(1.0, min_exponent);
  const auto steps = static_cast<int>(rounded / std::ldexp(1.0, exponent - f.mantissa));
  const int exponent_field = normal ? exponent + f.bias : 0;
  const int mantissa = normal ? steps - (1 << f.mantissa) : steps;
  return static_cast<uint8_t>(sign | (exponent_field << f.mantissa) | mantissa);
}

float fp8_to_f32(uint8_t bits, KvQuant quant) {
  return static_cast<float>(decode_fp8(bits, fp8_shape(quant)));
}

void encode_row(const KvFormat& format, DType dtype, int kv_head, const float* x, int n,
                uint8_t* out) {
  if (is_fp8(format.quant)) {
    const float s = format.scale_of(kv_head);
    for (int i = 0; i < n; ++i) out[i] = f32_to_fp8(x[i] / s, format.quant);
    return;
  }
  if (is_affine(format.quant)) {
    const size_t bytes = affine_group_bytes(format);
    for (int g = 0; g < n / format.group; ++g) {
      encode_affine(format, dtype, x + static_cast<size_t>(g * format.group),
                    out + static_cast<size_t>(g) * bytes);
    }
    return;
  }
  const size_t bytes = block_shape(format.quant).bytes;
  for (int b = 0; b < n / kGgmlBlock; ++b) {
    const float* block = x + static_cast<size_t>(b) * kGgmlBlock;
    uint8_t* dst = out + static_cast<size_t>(b) * bytes;
    if (format.quant == KvQuant::q8_0) {
      encode_q8_0(block, dst);
    } else {
      encode_low_bits(format.quant, block, dst);
    }
  }
}

void decode_row(const KvFormat& format, int kv_head, const uint8_t* in, int n, float* out) {
  if (is_fp8(format.quant)) {
    const float s = format.scale_of(kv_head);
    for (int i = 0; i < n; ++i) out[i] = fp8_to_f32(in[i], format.quant) * s;
    return;
  }
  if (is_affine(format.quant)) {
    const size_t bytes = affine_group_bytes(format);
    for (int g = 0; g < n / format.group; ++g) {
      decode_affine(format, in + static_cast<size_t>(g) * bytes,
                    out + static_cast<size_t>(g * format.group));
    }
    return;
  }
  const size_t bytes = block_shape(format.quant).bytes;
  for (int b = 0; b < n / kGgmlBlock; ++b) {
    decode_block(format.quant, in + static_cast<size_t>(b) * bytes,
                 out + static_cast<size_t>(b) * kGgmlBlock);
  }
}

void round_trip_row(const KvFormat& format, DType dtype, int kv_head, const float* x, int n,
                    float* out) {
  if (!format.quantized()) {
    std::copy_n(x, n, out);
    return;
  }
  std::vector<uint8_t> bytes(row_bytes(format, n));
  encode_row(format, dtype, kv_head, x, n, bytes.data());
  decode_row(format, kv_head, bytes.data(), n, out);
}

}  // namespace kvfuzz
