#include "kvfuzz/kv_format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "kvfuzz/dtype.h"

namespace kvfuzz {

namespace {

constexpr std::array<std::pair<KvQuant, std::string_view>, 13> kNames{{
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
    {KvQuant::channel_u8, "channel_u8"},
    {KvQuant::channel_u4, "channel_u4"},
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

// Each code's value, made once per format from the definition above: the conversions are a
// lookup (decoding) and a search of the ordered positive codes (encoding), which the fuzz
// targets' and engines' inner loops call per element.
struct Fp8Table {
  std::array<float, 256> value;      // every code's value, NaN codes as NaN
  std::array<double, 128> positive;  // codes 0..max_code: ascending, as the codes are
  uint8_t max_code;
  uint8_t nan_code;
};

Fp8Table make_fp8_table(KvQuant quant) {
  const Fp8Shape f = fp8_shape(quant);
  Fp8Table t{};
  t.max_code = f.max_code;
  t.nan_code = f.nan_code;
  for (int code = 0; code < 256; ++code) {
    t.value[static_cast<size_t>(code)] =
        static_cast<float>(decode_fp8(static_cast<uint8_t>(code), f));
  }
  for (int code = 0; code <= f.max_code; ++code) {
    t.positive[static_cast<size_t>(code)] = decode_fp8(static_cast<uint8_t>(code), f);
  }
  return t;
}

const Fp8Table& fp8_table(KvQuant quant) {
  static const Fp8Table e4m3 = make_fp8_table(KvQuant::fp8_e4m3fn);
  static const Fp8Table e5m2 = make_fp8_table(KvQuant::fp8_e5m2);
  return quant == KvQuant::fp8_e4m3fn ? e4m3 : e5m2;
}

uint8_t encode_fp8(const Fp8Table& t, float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | t.nan_code);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= t.positive[t.max_code]) return static_cast<uint8_t>(sign | t.max_code);  // saturates
  // The codes on either side of a (below <= a < above), then the nearer; a tie (the
  // midpoint is exact in double) goes to the even code, whose mantissa's last bit is 0.
  const auto first = t.positive.begin();
  const auto above = std::upper_bound(first, first + t.max_code + 1, a);
  const auto below = above - 1;
  const double midpoint = (*below + *above) / 2;
  auto code = static_cast<int>(below - first);
  if (a > midpoint || (a == midpoint && code % 2 == 1)) ++code;
  return static_cast<uint8_t>(sign | code);
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

// The block formats' arithmetic, one step at a time: the encoders below and round_trip_reach()
// both use these, so that the reach is of exactly the encoder's f32 operations.
float inverse(float d) {
  return d != 0.0f ? 1.0f / d : 0.0f;
}
float f16_round(float x) {
  return f16_to_f32(f32_to_f16(x));
}
// A quant kept in [lo, hi] as fmax then fmin keep it: a NaN (from a NaN or infinite input,
// which ggml leaves undefined) becomes lo, as the CUDA kernels' fmaxf makes it
// (cuda/blocks.cuh), never a float-to-integer conversion out of range.
float clamp_quant(float q, float lo, float hi) {
  return std::fmin(std::fmax(q, lo), hi);
}
// q8_0's quant of x for 1 / d = id: roundf (ties away from zero), in [-127, 127] (|x| <=
// amax; the clamp only matters to round_trip_reach's corners, which may pair an x with an
// amax it is not below).
float quant_q8_0(float x, float id) {
  return clamp_quant(std::round(x * id), -127.0f, 127.0f);
}
// q4_0 / q5_0: min(top, trunc(x / d + top / 2 + 0.5)), at least 0 (as above).
float quant_zero_offset(float x, float id, bool fifth_bit) {
  const float offset = fifth_bit ? 16.5f : 8.5f;
  const float top = fifth_bit ? 31.0f : 15.0f;
  return clamp_quant(std::trunc(x * id + offset), 0.0f, top);
}
// q4_1 / q5_1: trunc((x - m) / d + 0.5) (q5_1 unclamped by ggml; x >= m keeps it in range).
float quant_with_min(float x, float min, float id, bool fifth_bit) {
  const float top = fifth_bit ? 31.0f : 15.0f;
  return clamp_quant(std::trunc((x - min) * id + 0.5f), 0.0f, top);
}

// ggml's quantize_row_q8_0_ref for one block: d = amax / 127, q = roundf(x / d) (ties away
// from zero), with x / d computed as x * (1 / d) in f32.
void encode_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = inverse(d);
  put_f16(out, d);
  for (int j = 0; j < kGgmlBlock; ++j) {
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(quant_q8_0(x[j], id)));
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
    id = inverse(d);
    for (int j = 0; j < kGgmlBlock; ++j) {
      q[static_cast<size_t>(j)] =
          static_cast<uint8_t>(quant_zero_offset(x[j], id, shape.fifth_bit));
    }
  } else {
    min = x[0];
    float max = x[0];
    for (int j = 0; j < kGgmlBlock; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    d = (max - min) / static_cast<float>(top);
    id = inverse(d);
    for (int j = 0; j < kGgmlBlock; ++j) {
      q[static_cast<size_t>(j)] =
          static_cast<uint8_t>(quant_with_min(x[j], min, id, shape.fifth_bit));
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

// MLX's quant of x: clamp(rint((x - bias) / scale), 0, 2^bits - 1) (a NaN: 0, clamp_quant).
float quant_affine(float x, float bias, float scale, float n_bins) {
  return clamp_quant(std::rint((x - bias) / scale), 0.0f, n_bins);
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
    const auto code = static_cast<uint32_t>(quant_affine(x[j], bias, scale, n_bins));
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

// The least and the greatest of f(a, b) over a in [a_lo, a_hi], b in [b_lo, b_hi], for f
// monotone in each argument (products, and the block formats' quant steps): at the corners.
template <class F>
std::pair<float, float> corners(F f, float a_lo, float a_hi, float b_lo, float b_hi) {
  const float c[] = {f(a_lo, b_lo), f(a_lo, b_hi), f(a_hi, b_lo), f(a_hi, b_hi)};
  return {*std::min_element(std::begin(c), std::end(c)),
          *std::max_element(std::begin(c), std::end(c))};
}

// The inverse of a scale anywhere in [d_lo, d_hi] (one sign, 0 only at an end): between the
// inverses of the ends, where a zero end (d = 0 gives ggml's id = 0, and d just off 0 an id
// as large as floats go) stands for the largest float of its sign.
std::pair<float, float> inverse_span(float d_lo, float d_hi) {
  const auto inv = [](float d, float sign) {
    return d != 0.0f ? 1.0f / d : sign * std::numeric_limits<float>::max();
  };
  const float a = inv(d_lo, d_hi > 0 ? 1.0f : -1.0f), b = inv(d_hi, d_lo < 0 ? -1.0f : 1.0f);
  return {std::min(a, b), std::max(a, b)};
}

// One block of 32 whose inputs may be anything in [lo[j], hi[j]]: what each element may read
// back, as [out_lo[j], out_hi[j]]. Each step of the encoder is monotone in each of its
// inputs (max, min, a division by a constant, f16 rounding, x * id, the quant's rounding, the
// decoder's product and sum), so a step's range is its inputs' ranges' corners; the block's
// statistics (amax, the signed extreme, min and max) get ranges from the elements' (the
// element that attains one is not tracked: the ranges are wider than need be, never narrower).
void reach_block(KvQuant quant, const float* lo, const float* hi, float* out_lo, float* out_hi) {
  const BlockShape shape = block_shape(quant);
  // |x|'s least over [lo, hi] (0 where it holds 0) and greatest.
  float amax_lo = 0, amax_hi = 0, min_lo = lo[0], min_hi = hi[0], max_lo = lo[0], max_hi = hi[0];
  float most_positive = -INFINITY, most_negative = INFINITY;
  std::array<float, kGgmlBlock> least{};
  for (int j = 0; j < kGgmlBlock; ++j) {
    least[j] = lo[j] <= 0 && hi[j] >= 0 ? 0.0f : std::min(std::fabs(lo[j]), std::fabs(hi[j]));
    amax_lo = std::max(amax_lo, least[j]);
    amax_hi = std::max({amax_hi, std::fabs(lo[j]), std::fabs(hi[j])});
    min_lo = std::min(min_lo, lo[j]);
    min_hi = std::min(min_hi, hi[j]);
    max_lo = std::max(max_lo, lo[j]);
    max_hi = std::max(max_hi, hi[j]);
    most_positive = std::max(most_positive, hi[j]);
    most_negative = std::min(most_negative, lo[j]);
  }
  const auto widen = [&](int j, float a, float b) {
    out_lo[j] = std::min(out_lo[j], a);
    out_hi[j] = std::max(out_hi[j], b);
  };
  for (int j = 0; j < kGgmlBlock; ++j) {
    out_lo[j] = INFINITY;
    out_hi[j] = -INFINITY;
  }
  const auto product = [](float a, float b) { return a * b; };
  if (quant == KvQuant::q8_0) {
    const float d_lo = amax_lo / 127, d_hi = amax_hi / 127;
    const auto [id_lo, id_hi] = inverse_span(d_lo, d_hi);
    const float s_lo = f16_round(d_lo), s_hi = f16_round(d_hi);
    for (int j = 0; j < kGgmlBlock; ++j) {
      const auto [q_lo, q_hi] = corners(quant_q8_0, lo[j], hi[j], id_lo, id_hi);
      const auto [v_lo, v_hi] = corners(product, q_lo, q_hi, s_lo, s_hi);
      widen(j, v_lo, v_hi);
    }
    return;
  }
  if (!shape.has_min) {
    // d = M / -8 (-16), M the signed element of largest magnitude: positive or negative as
    // the elements may reach amax_lo on either side; each sign a range of its own, and M = 0
    // (every element 0) gives id = 0.
    const float divisor = shape.fifth_bit ? -16.0f : -8.0f;
    const float zero = shape.fifth_bit ? 16.0f : 8.0f;
    const auto side = [&](float m_lo, float m_hi) {
      const float d_lo = m_hi / divisor, d_hi = m_lo / divisor;  // divisor < 0
      const auto [id_lo, id_hi] = inverse_span(d_lo, d_hi);
      const float s_lo = f16_round(d_lo), s_hi = f16_round(d_hi);
      const auto quant_of = [&](float x, float id) {
        return quant_zero_offset(x, id, shape.fifth_bit) - zero;
      };
      for (int j = 0; j < kGgmlBlock; ++j) {
        const auto [q_lo, q_hi] = corners(quant_of, lo[j], hi[j], id_lo, id_hi);
        const auto [v_lo, v_hi] = corners(product, q_lo, q_hi, s_lo, s_hi);
        widen(j, v_lo, v_hi);
      }
    };
    // M is the *first* element of largest magnitude (ggml's `amax < fabsf(v)`): a sign is
    // possible only where some element j may take it at a magnitude m that every element
    // before j may stay below and none after j need exceed (m at j's largest on that side,
    // the others at their least). Elements tied exactly in magnitude with opposite signs
    // (small-integer data rotated, then rounded to f16) then give M one sign, not both.
    const auto may_lead = [&](bool positive) {
      for (int j = 0; j < kGgmlBlock; ++j) {
        const float m = positive ? hi[j] : -lo[j];
        if (!(m > 0)) continue;
        bool leads = true;
        for (int i = 0; i < kGgmlBlock && leads; ++i) {
          if (i != j) leads = i < j ? least[i] < m : least[i] <= m;
        }
        if (leads) return true;
      }
      return false;
    };
    if (most_positive >= amax_lo && most_positive > 0 && may_lead(true)) {
      side(std::max(amax_lo, 0.0f), most_positive);
    }
    if (most_negative <= -amax_lo && most_negative < 0 && may_lead(false)) {
      side(most_negative, std::min(-amax_lo, -0.0f));
    }
    if (amax_lo == 0) {
      for (int j = 0; j < kGgmlBlock; ++j) widen(j, 0.0f, 0.0f);
    }
    return;
  }
  // q4_1, q5_1: d = (max - min) / top (at least 0), m = min, x = q d + m.
  const float top = shape.fifth_bit ? 31.0f : 15.0f;
  const float d_lo = std::max(0.0f, (max_lo - min_hi) / top), d_hi = (max_hi - min_lo) / top;
  const auto [id_lo, id_hi] = inverse_span(d_lo, d_hi);
  const float s_lo = f16_round(d_lo), s_hi = f16_round(d_hi);
  const float m_lo = f16_round(min_lo), m_hi = f16_round(min_hi);
  for (int j = 0; j < kGgmlBlock; ++j) {
    // (x - min) * id over x in [lo, hi], min in [min_lo, min_hi] (x >= min), id >= 0.
    const float above_lo = std::max(0.0f, lo[j] - min_hi),
                above_hi = std::max(0.0f, hi[j] - min_lo);
    const auto quant_of = [&](float above, float id) {
      return quant_with_min(above, 0.0f, id, shape.fifth_bit);
    };
    auto [q_lo, q_hi] = corners(quant_of, above_lo, above_hi, id_lo, id_hi);
    if (d_lo == 0) q_lo = 0;                            // d = 0: id = 0, every q 0
    const float low = q_lo * s_lo, high = q_hi * s_hi;  // two roundings, as the decoder
    widen(j, low + m_lo, high + m_hi);
  }
}

// One affine group whose inputs may be anything in [lo[j], hi[j]] (reach_block's contract).
// The encoder's steps are monotone but one: the edge snapped to the grid, q0 = rint(edge /
// scale), which picks the scale edge / q0. So the reach takes every case apart: each side
// the extreme of larger magnitude may be on (mask), and each q0 the snapping may give
// there; within a case every step is monotone (corners). Too many q0 (a group whose
// extremes may move by more than a few steps): every element anywhere the group's values
// may reach, |edge| + 2 (max - min) (|edge / q0| <= 2 scale0 for |edge / scale0| >= 1/2).
void reach_affine(const KvFormat& format, DType dtype, const float* lo, const float* hi,
                  float* out_lo, float* out_hi) {
  const int n = format.group;
  const auto n_bins = static_cast<float>((1 << affine_bits(format.quant)) - 1);
  constexpr float kEps = 1e-7f;
  float min_lo = lo[0], min_hi = hi[0], max_lo = lo[0], max_hi = hi[0];
  for (int j = 0; j < n; ++j) {
    min_lo = std::min(min_lo, lo[j]);
    min_hi = std::min(min_hi, hi[j]);
    max_lo = std::max(max_lo, lo[j]);
    max_hi = std::max(max_hi, hi[j]);
  }
  std::fill_n(out_lo, n, INFINITY);
  std::fill_n(out_hi, n, -INFINITY);
  const auto widen = [&](int j, float a, float b) {
    out_lo[j] = std::min(out_lo[j], a);
    out_hi[j] = std::max(out_hi[j], b);
  };
  const auto abs_span = [](float a, float b) {  // |x| over [a, b]: least, greatest
    const float least = a <= 0 && b >= 0 ? 0.0f : std::min(std::fabs(a), std::fabs(b));
    return std::pair{least, std::max(std::fabs(a), std::fabs(b))};
  };
  const auto [min_abs_lo, min_abs_hi] = abs_span(min_lo, min_hi);
  const auto [max_abs_lo, max_abs_hi] = abs_span(max_lo, max_hi);
  const float scale0_lo = std::max((max_lo - min_hi) / n_bins, kEps);
  const float scale0_hi = std::max((max_hi - min_lo) / n_bins, kEps);
  const auto divide = [](float a, float b) { return a / b; };
  const auto product = [](float a, float b) { return a * b; };
  // One case: the scale in [s_lo, s_hi] (one sign), the bias in [b_lo, b_hi]. The quant is
  // monotone in x, the bias and the scale each (corners); a corner at a scale of 0 with
  // x = bias (0 / 0) stands for every quant.
  const auto quants = [&](float s_lo, float s_hi, float b_lo, float b_hi) {
    const float sr_lo = round_to_dtype(s_lo, dtype), sr_hi = round_to_dtype(s_hi, dtype);
    const float br_lo = round_to_dtype(b_lo, dtype), br_hi = round_to_dtype(b_hi, dtype);
    for (int j = 0; j < n; ++j) {
      float q_lo = INFINITY, q_hi = -INFINITY;
      for (const float x : {lo[j], hi[j]}) {
        for (const float b : {b_lo, b_hi}) {
          for (const float s : {s_lo, s_hi}) {
            const bool undefined = std::isnan((x - b) / s);  // 0 / 0: every quant
            const float q = quant_affine(x, b, s, n_bins);
            q_lo = undefined ? 0.0f : std::min(q_lo, q);
            q_hi = undefined ? n_bins : std::max(q_hi, q);
          }
        }
      }
      const auto [p_lo, p_hi] = corners(product, q_lo, q_hi, sr_lo, sr_hi);
      const float v_lo = p_lo + br_lo, v_hi = p_hi + br_hi;
      widen(j, v_lo, v_hi);
    }
  };
  bool too_many = false;
  for (const bool mask : {true, false}) {
    // mask: |min| > |max|, the scale positive and the edge the minimum; else the maximum
    // and a negative scale.
    if (mask ? !(min_abs_hi > max_abs_lo) : !(min_abs_lo <= max_abs_hi)) continue;
    const float e_lo = mask ? min_lo : max_lo, e_hi = mask ? min_hi : max_hi;
    const float s0_lo = mask ? scale0_lo : -scale0_hi, s0_hi = mask ? scale0_hi : -scale0_lo;
    const auto [r_lo, r_hi] = corners(divide, e_lo, e_hi, s0_lo, s0_hi);
    const float q0_lo = std::rint(r_lo), q0_hi = std::rint(r_hi);
    if (!(q0_hi - q0_lo <= 8)) {
      too_many = true;
      continue;
    }
    for (float q0 = q0_lo; q0 <= q0_hi; q0 += 1) {
      if (q0 == 0) {
        quants(s0_lo, s0_hi, 0.0f, 0.0f);
      } else {
        const auto [s_lo, s_hi] = corners(divide, e_lo, e_hi, q0, q0);
        quants(s_lo, s_hi, e_lo, e_hi);
      }
    }
  }
  if (too_many) {
    const float reach =
        1.01f * (std::max(min_abs_hi, max_abs_hi) + 2 * (max_hi - min_lo) + 2 * scale0_hi);
    for (int j = 0; j < n; ++j) widen(j, -reach, reach);
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
    case KvQuant::channel_u8:
      return 8;
    case KvQuant::channel_u4:
      return 4;
    default:
      return 0;
  }
}

void quantize_group(KvQuant quant, const float* x, int count, int n, float* out) {
  const auto levels = static_cast<float>((1 << affine_bits(quant)) - 1);
  const auto at = [n](int i, int d) {
    return static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(d);
  };
  for (int d = 0; d < n; ++d) {
    float lo = x[at(0, d)], hi = lo;
    for (int i = 1; i < count; ++i) {
      lo = std::min(lo, x[at(i, d)]);
      hi = std::max(hi, x[at(i, d)]);
    }
    const float scale = (hi - lo) / levels;
    for (int i = 0; i < count; ++i) {
      const float q =
          scale == 0 ? 0.0f : std::clamp(std::nearbyint((x[at(i, d)] - lo) / scale), 0.0f, levels);
      const float scaled = q * scale;  // rounded once, then the sum once: no fused multiply-add
      out[at(i, d)] = scaled + lo;
    }
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
  if (is_channel(quant)) throw std::invalid_argument("row_bytes: a per-channel format has no rows");
  if (is_fp8(quant)) return static_cast<size_t>(n);
  if (is_affine(quant)) return static_cast<size_t>(n / format.group) * affine_group_bytes(format);
  return static_cast<size_t>(n / kGgmlBlock) * block_shape(quant).bytes;
}

float fp8_max(KvQuant quant) {
  const Fp8Table& t = fp8_table(quant);
  return t.value[t.max_code];
}

uint8_t f32_to_fp8(float x, KvQuant quant) {
  return encode_fp8(fp8_table(quant), x);
}

float fp8_to_f32(uint8_t bits, KvQuant quant) {
  return fp8_table(quant).value[bits];
}

void encode_row(const KvFormat& format, DType dtype, int kv_head, const float* x, int n,
                uint8_t* out) {
  if (is_channel(format.quant)) throw std::invalid_argument("encode_row: a per-channel format");
  if (is_fp8(format.quant)) {
    const float s = format.scale_of(kv_head);
    const Fp8Table& t = fp8_table(format.quant);
    for (int i = 0; i < n; ++i) out[i] = encode_fp8(t, x[i] / s);
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
  if (is_channel(format.quant)) throw std::invalid_argument("decode_row: a per-channel format");
  if (is_fp8(format.quant)) {
    const float s = format.scale_of(kv_head);
    const Fp8Table& t = fp8_table(format.quant);
    for (int i = 0; i < n; ++i) out[i] = t.value[in[i]] * s;
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
  if (!format.quantized() || is_channel(format.quant)) {  // a channel format: as given
    std::copy_n(x, n, out);
    return;
  }
  std::vector<uint8_t> bytes(row_bytes(format, n));
  encode_row(format, dtype, kv_head, x, n, bytes.data());
  decode_row(format, kv_head, bytes.data(), n, out);
}

}  // namespace kvfuzz

namespace kvfuzz {

void round_trip_reach(const KvFormat& format, DType dtype, int kv_head, const float* lo,
                      const float* hi, int n, float* out_lo, float* out_hi) {
  // Element by element, monotone (a channel format: as given, quantize_group's apart).
  if (!format.quantized() || is_fp8(format.quant) || is_channel(format.quant)) {
    round_trip_row(format, dtype, kv_head, lo, n, out_lo);
    round_trip_row(format, dtype, kv_head, hi, n, out_hi);
    return;
  }
  const int size = row_multiple(format);  // a block or a group
  for (int b = 0; b < n / size; ++b) {
    const size_t at = static_cast<size_t>(b) * static_cast<size_t>(size);
    if (std::equal(lo + at, lo + at + size, hi + at)) {  // one input: its one output
      round_trip_row(format, dtype, kv_head, lo + at, size, out_lo + at);
      std::copy_n(out_lo + at, size, out_hi + at);
    } else if (is_affine(format.quant)) {
      reach_affine(format, dtype, lo + at, hi + at, out_lo + at, out_hi + at);
    } else {
      reach_block(format.quant, lo + at, hi + at, out_lo + at, out_hi + at);
    }
  }
}

}  // namespace kvfuzz
