// Storage dtypes in kernel code: K/V elements held as f32, f16 or bf16 bits, decoded to
// float on load and rounded (to nearest, ties to even) on store, with the same bit
// manipulations as kvfuzz/dtype.h's software conversions (tests/cuda/test_dtype.cpp holds
// them to those bit for bit), so that a kernel stores exactly what the reference models on
// the device and on the SIMT launcher alike, without cuda_fp16.h's types.
#pragma once

#include "cuda/cuda_compat.h"

namespace kvfuzz::cuda {

// The element encodings; the values are kvfuzz::DType's order (f32, f16, bf16), then the
// OCP fp8 formats of a quantized cache (kvfuzz/kv_format.h: one byte, read back times the
// kv head's scale, which the caller applies).
enum StorageType : int {
  kStorageF32 = 0,
  kStorageF16 = 1,
  kStorageBf16 = 2,
  kStorageFp8E4m3 = 3,
  kStorageFp8E5m2 = 4,
  // ggml's blocks of 32 (kv_format.h): a row of a K or V head is whole blocks, not
  // elements; blocks.cuh reads and writes them.
  kStorageQ8_0 = 5,
  kStorageQ4_0 = 6,
  kStorageQ4_1 = 7,
  kStorageQ5_0 = 8,
  kStorageQ5_1 = 9,
  // MLX's affine groups (kv_format.h): a row is whole groups of `group` elements, each an
  // f32 scale and bias and the packed 2-, 4- or 8-bit quants; blocks.cuh reads and writes
  // them too.
  kStorageAffine2 = 10,
  kStorageAffine4 = 11,
  kStorageAffine8 = 12
};
// "Not rounded": what P's or the output's rounding holds when an engine does not round.
constexpr int kNoRounding = -1;

KVFUZZ_DEVICE unsigned float_bits(float x) {
#ifdef __CUDACC__
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(unsigned, x);
#endif
}
KVFUZZ_DEVICE float bits_float(unsigned b) {
#ifdef __CUDACC__
  return __uint_as_float(b);
#else
  return __builtin_bit_cast(float, b);
#endif
}

// IEEE binary16: overflow to Inf, gradual underflow, NaN stays a quiet NaN.
KVFUZZ_DEVICE unsigned short to_f16_bits(float value) {
  const unsigned bits = float_bits(value);
  const unsigned sign = (bits >> 16) & 0x8000u;
  const unsigned abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u)
    return static_cast<unsigned short>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  const int exponent = static_cast<int>(abs >> 23) - 127;
  if (exponent > 15) return static_cast<unsigned short>(sign | 0x7C00u);
  const unsigned mantissa = (abs & 0x7FFFFFu) | 0x800000u;
  int shift = 13;
  unsigned half_exponent = 0;
  if (exponent >= -14) {
    half_exponent = static_cast<unsigned>(exponent + 15);
  } else {
    if (abs == 0) return static_cast<unsigned short>(sign);
    shift = 13 + (-14 - exponent);
    if (shift > 24) return static_cast<unsigned short>(sign);
  }
  const unsigned kept = mantissa >> shift;
  const unsigned rest = mantissa & ((1u << shift) - 1);
  const unsigned halfway = 1u << (shift - 1);
  unsigned result = (half_exponent << 10) + (half_exponent ? (kept & 0x3FFu) : kept);
  if (rest > halfway || (rest == halfway && (kept & 1u))) ++result;
  return static_cast<unsigned short>(sign | result);
}

KVFUZZ_DEVICE float from_f16_bits(unsigned short bits) {
  const unsigned sign = static_cast<unsigned>(bits & 0x8000u) << 16;
  const unsigned exponent = (bits >> 10) & 0x1Fu;
  const unsigned mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {
    return bits_float(sign | 0x7F800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

KVFUZZ_DEVICE unsigned short to_bf16_bits(float value) {
  const unsigned bits = float_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<unsigned short>((bits >> 16) | 0x40u);
  return static_cast<unsigned short>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

KVFUZZ_DEVICE float from_bf16_bits(unsigned short bits) {
  return bits_float(static_cast<unsigned>(bits) << 16);
}

// OCP fp8 (kv_format.h's f32_to_fp8 / fp8_to_f32, bit for bit: tests/cuda/test_dtype.cpp):
// e4m3fn has 3 mantissa bits, bias 7, no infinities, 448 its largest (0x7E) and 0x7F NaN;
// e5m2 2 bits, bias 15, 57344 its largest (0x7B), 0x7C infinity, above NaN.
KVFUZZ_DEVICE int fp8_mantissa_bits(int type) {
  return type == kStorageFp8E4m3 ? 3 : 2;
}
KVFUZZ_DEVICE int fp8_bias(int type) {
  return type == kStorageFp8E4m3 ? 7 : 15;
}
KVFUZZ_DEVICE unsigned fp8_max_code(int type) {
  return type == kStorageFp8E4m3 ? 0x7Eu : 0x7Bu;
}

// 2^e for the exponents fp8 needs (normal in f32).
KVFUZZ_DEVICE float power_of_two(int e) {
  return bits_float(static_cast<unsigned>(e + 127) << 23);
}

KVFUZZ_DEVICE float from_fp8_bits(unsigned char bits, int type) {
  const int m = fp8_mantissa_bits(type);
  const unsigned magnitude = bits & 0x7Fu;
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  const int field = static_cast<int>(magnitude >> m);
  const int mantissa = static_cast<int>(magnitude & ((1u << m) - 1));
  if (magnitude > fp8_max_code(type)) {  // e5m2's infinities, both formats' NaNs
    return m == 2 && mantissa == 0 ? sign * bits_float(0x7F800000u) : bits_float(0x7FC00000u);
  }
  if (field == 0) return sign * static_cast<float>(mantissa) * power_of_two(1 - fp8_bias(type) - m);
  return sign * static_cast<float>((1 << m) + mantissa) * power_of_two(field - fp8_bias(type) - m);
}

// Round to nearest even, saturating at the largest finite value; NaN stays NaN.
KVFUZZ_DEVICE unsigned char to_fp8_bits(float x, int type) {
  const int m = fp8_mantissa_bits(type);
  const unsigned bits = float_bits(x);
  const unsigned sign = (bits >> 24) & 0x80u;
  const unsigned abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<unsigned char>(sign | (m == 3 ? 0x7Fu : 0x7Eu));
  const float a = bits_float(abs_bits);
  if (a >= from_fp8_bits(static_cast<unsigned char>(fp8_max_code(type)), type)) {
    return static_cast<unsigned char>(sign | fp8_max_code(type));
  }
  if (a == 0.0f) return static_cast<unsigned char>(sign);
  // The quantum of a's binade (the subnormals' below the smallest normal): a / quantum is
  // exact in f32 (a power-of-two scaling) and rounds to nearest even.
  const int min_exponent = 1 - fp8_bias(type);
  int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (exponent < min_exponent) exponent = min_exponent;
  unsigned steps = static_cast<unsigned>(rintf(a * power_of_two(m - exponent)));
  if (steps == 0) return static_cast<unsigned char>(sign);
  if (steps >> (m + 1)) {  // rounded up into the next binade
    steps >>= 1;
    ++exponent;
  }
  const unsigned field = steps >> m ? static_cast<unsigned>(exponent + fp8_bias(type)) : 0u;
  return static_cast<unsigned char>(sign | (field << m) | (steps & ((1u << m) - 1)));
}

// x rounded to `dtype` (a StorageType, or kNoRounding: x itself).
KVFUZZ_DEVICE float round_to(float x, int dtype) {
  if (dtype == kStorageF16) return from_f16_bits(to_f16_bits(x));
  if (dtype == kStorageBf16) return from_bf16_bits(to_bf16_bits(x));
  return x;
}

// Element i of an array of `dtype` elements.
KVFUZZ_DEVICE float load_element(const void* base, long long i, int dtype) {
  if (dtype == kStorageF32) return static_cast<const float*>(base)[i];
  if (dtype >= kStorageFp8E4m3)
    return from_fp8_bits(static_cast<const unsigned char*>(base)[i], dtype);
  const unsigned short bits = static_cast<const unsigned short*>(base)[i];
  return dtype == kStorageF16 ? from_f16_bits(bits) : from_bf16_bits(bits);
}

KVFUZZ_DEVICE void store_element(void* base, long long i, float x, int dtype) {
  if (dtype == kStorageF32) {
    static_cast<float*>(base)[i] = x;
  } else if (dtype >= kStorageFp8E4m3) {
    static_cast<unsigned char*>(base)[i] = to_fp8_bits(x, dtype);
  } else {
    static_cast<unsigned short*>(base)[i] = dtype == kStorageF16 ? to_f16_bits(x) : to_bf16_bits(x);
  }
}

// Bytes of one element.
KVFUZZ_HOST_DEVICE int element_bytes(int dtype) {
  return dtype == kStorageF32 ? 4 : dtype >= kStorageFp8E4m3 ? 1 : 2;
}

}  // namespace kvfuzz::cuda
