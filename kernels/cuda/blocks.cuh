// ggml's block formats in kernel code (kvfuzz/kv_format.h: q8_0, q4_0, q4_1, q5_0, q5_1):
// a row of one K or V head stored as blocks of 32 elements, each an f16 scale (and minimum)
// and its quants, written as ggml's reference quantizers write them and read back as its
// dequantizers read them; and MLX's affine groups (affine2, affine4, affine8): blocks of
// `group` elements (32, 64 or 128), each an f32 scale and bias and the packed quants, as
// MLX's `quantize` writes them and its quantized_matmul reads them. The same steps as
// scenario/kv_format.cpp's, on the device and the SIMT launcher alike;
// tests/cuda/test_cuda_engines.cpp holds them to those bit for bit.
#pragma once

#include "cuda/cuda_compat.h"
#include "cuda/dtype.cuh"

namespace kvfuzz::cuda {

constexpr int kBlock = 32;
constexpr int kMaxAffineGroup = 128;

// Rows of whole blocks (ggml's or affine groups), in bytes.
KVFUZZ_HOST_DEVICE bool is_block_type(int type) {
  return type >= kStorageQ8_0;
}
KVFUZZ_HOST_DEVICE bool is_affine_type(int type) {
  return type >= kStorageAffine2;
}
KVFUZZ_HOST_DEVICE int affine_bits(int type) {
  return type == kStorageAffine2 ? 2 : type == kStorageAffine4 ? 4 : 8;
}
// An affine group's bytes: the f32 scale and bias, then group * bits / 8 of quants.
KVFUZZ_HOST_DEVICE int affine_group_bytes(int type, int group) {
  return 8 + group * affine_bits(type) / 8;
}
KVFUZZ_HOST_DEVICE bool block_has_min(int type) {
  return type == kStorageQ4_1 || type == kStorageQ5_1;
}
KVFUZZ_HOST_DEVICE bool block_fifth_bit(int type) {
  return type == kStorageQ5_0 || type == kStorageQ5_1;
}
// Bytes of one block: the scale (2), the minimum (2), the fifth bits (4), the quants.
KVFUZZ_HOST_DEVICE int block_bytes(int type) {
  if (type == kStorageQ8_0) return 2 + kBlock;
  return 2 + (block_has_min(type) ? 2 : 0) + (block_fifth_bit(type) ? 4 : 0) + kBlock / 2;
}
// Bytes of a row of `width` elements (a multiple of 32, or of an affine format's group).
KVFUZZ_HOST_DEVICE long long block_row_bytes(int type, int width, int group) {
  if (is_affine_type(type)) {
    return static_cast<long long>(width / group) * affine_group_bytes(type, group);
  }
  return static_cast<long long>(width / kBlock) * block_bytes(type);
}

KVFUZZ_DEVICE float read_f16(const unsigned char* p) {
  return from_f16_bits(static_cast<unsigned short>(p[0] | (p[1] << 8)));
}
KVFUZZ_DEVICE void write_f16(unsigned char* p, float x) {
  const unsigned short bits = to_f16_bits(x);
  p[0] = static_cast<unsigned char>(bits & 0xFFu);
  p[1] = static_cast<unsigned char>(bits >> 8);
}

KVFUZZ_DEVICE float read_f32(const unsigned char* p) {
  return bits_float(static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8) |
                    (static_cast<unsigned>(p[2]) << 16) | (static_cast<unsigned>(p[3]) << 24));
}
KVFUZZ_DEVICE void write_f32(unsigned char* p, float x) {
  const unsigned bits = float_bits(x);
  for (int b = 0; b < 4; ++b) p[b] = static_cast<unsigned char>(bits >> (8 * b));
}

// Element j of an affine group: scale * q + bias in f32, the product rounded first (MLX's
// quantized_matmul on the CPU); the quants little-endian, element j at bit j * bits.
// `high_first` (a kernel fault) unpacks each byte from its high bits instead.
KVFUZZ_DEVICE float load_affine_element(const unsigned char* group_bytes, int j, int type,
                                        bool high_first = false) {
  const int bits = affine_bits(type);
  const int bit = high_first ? j * bits / 8 * 8 + (8 - bits - j * bits % 8) : j * bits;
  const float scale = read_f32(group_bytes), bias = read_f32(group_bytes + 4);
  const unsigned q =
      (static_cast<unsigned>(group_bytes[8 + bit / 8]) >> (bit % 8)) & ((1u << bits) - 1u);
  return KVFUZZ_MUL_ROUNDED(scale, static_cast<float>(q)) + bias;
}

// Element d of a row stored in blocks: q d (q8_0), (q - 8) d, (q - 16) d, or q d + m; or in
// affine groups of `group`.
KVFUZZ_DEVICE float load_block_element(const unsigned char* row, int d, int type, int group,
                                       bool high_first = false) {
  if (is_affine_type(type)) {
    return load_affine_element(
        row + static_cast<long long>(d / group) * affine_group_bytes(type, group), d % group, type,
        high_first);
  }
  const unsigned char* block = row + static_cast<long long>(d / kBlock) * block_bytes(type);
  const int j = d % kBlock;
  const float scale = read_f16(block);
  if (type == kStorageQ8_0)
    return static_cast<float>(static_cast<signed char>(block[2 + j])) * scale;
  const unsigned char* at = block + 2;
  float m = 0;
  if (block_has_min(type)) {
    m = read_f16(at);
    at += 2;
  }
  unsigned qh = 0;
  if (block_fifth_bit(type)) {
    qh = static_cast<unsigned>(at[0]) | (static_cast<unsigned>(at[1]) << 8) |
         (static_cast<unsigned>(at[2]) << 16) | (static_cast<unsigned>(at[3]) << 24);
    at += 4;
  }
  const unsigned char byte = at[j % (kBlock / 2)];
  int q = j < kBlock / 2 ? (byte & 0x0F) : (byte >> 4);
  if (block_fifth_bit(type)) q |= static_cast<int>((qh >> j) & 1u) << 4;
  const int zero = block_has_min(type) ? 0 : (block_fifth_bit(type) ? 16 : 8);
  const float value = KVFUZZ_MUL_ROUNDED(static_cast<float>(q - zero), scale);
  return block_has_min(type) ? value + m : value;
}

// The larger and smaller of a and b as std::max(a, b) and std::min(a, b) pick them (the
// first on a tie: +0 and -0 stay as the reference has them, where fmaxf may pick either).
KVFUZZ_DEVICE float larger(float a, float b) {
  return a < b ? b : a;
}
KVFUZZ_DEVICE float smaller(float a, float b) {
  return b < a ? b : a;
}

// One group of `group` elements x stored at `out` as MLX's `quantize` stores it, in its f32
// arithmetic: the scale (max - min) / (2^bits - 1), at least 1e-7, signed towards the
// extreme of larger magnitude (the edge); the edge snapped to the grid (q0 = rint(edge /
// scale); when q0 != 0 the scale becomes edge / q0 and the bias the edge, else the bias
// is 0); each quant clamp(rint((x - bias) / scale), 0, 2^bits - 1) with that unrounded
// scale (a NaN quant: 0); the scale and bias stored rounded to the layout's dtype.
KVFUZZ_DEVICE void store_affine_group(const float* x, unsigned char* out, int type, int group,
                                      int dtype) {
  const int bits = affine_bits(type);
  const auto n_bins = static_cast<float>((1 << bits) - 1);
  float w_min = INFINITY, w_max = -INFINITY;
  for (int j = 0; j < group; ++j) {
    w_max = larger(w_max, x[j]);
    w_min = smaller(w_min, x[j]);
  }
  const bool towards_min = fabsf(w_min) > fabsf(w_max);
  float scale = larger((w_max - w_min) / n_bins, 1e-7f);
  scale = towards_min ? scale : -scale;
  const float edge = towards_min ? w_min : w_max;
  const float q0 = rintf(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  write_f32(out, round_to(scale, dtype));
  write_f32(out + 4, round_to(bias, dtype));
  unsigned char* words = out + 8;
  for (int b = 0; b < group * bits / 8; ++b) words[b] = 0;
  for (int j = 0; j < group; ++j) {
    const float q = fminf(fmaxf(rintf((x[j] - bias) / scale), 0.0f), n_bins);
    const int bit = j * bits;
    words[bit / 8] |= static_cast<unsigned char>(static_cast<unsigned>(q) << (bit % 8));
  }
}

// One block of 32 elements x stored at `out` as ggml's quantize_row_*_ref stores it.
KVFUZZ_DEVICE void store_block(const float* x, unsigned char* out, int type) {
  if (type == kStorageQ8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = larger(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_f16(out, d);
    for (int j = 0; j < kBlock; ++j) {
      const float q = fminf(fmaxf(roundf(x[j] * id), -127.0f), 127.0f);
      out[2 + j] = static_cast<unsigned char>(static_cast<signed char>(q));
    }
    return;
  }
  const bool fifth = block_fifth_bit(type);
  const float top = fifth ? 31.0f : 15.0f;
  unsigned char q[kBlock];
  float d = 0, min = 0;
  if (!block_has_min(type)) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      if (amax < fabsf(x[j])) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    }
    d = max / (fifth ? -16.0f : -8.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float offset = fifth ? 16.5f : 8.5f;
    for (int j = 0; j < kBlock; ++j) {
      q[j] = static_cast<unsigned char>(fminf(fmaxf(truncf(x[j] * id + offset), 0.0f), top));
    }
  } else {
    min = x[0];
    float max = x[0];
    for (int j = 0; j < kBlock; ++j) {
      min = smaller(min, x[j]);
      max = larger(max, x[j]);
    }
    d = (max - min) / top;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      q[j] = static_cast<unsigned char>(fminf(fmaxf(truncf((x[j] - min) * id + 0.5f), 0.0f), top));
    }
  }
  unsigned char* at = out;
  write_f16(at, d);
  at += 2;
  if (block_has_min(type)) {
    write_f16(at, min);
    at += 2;
  }
  if (fifth) {
    unsigned qh = 0;
    for (int j = 0; j < kBlock; ++j) qh |= static_cast<unsigned>((q[j] >> 4) & 1u) << j;
    for (int b = 0; b < 4; ++b) at[b] = static_cast<unsigned char>(qh >> (8 * b));
    at += 4;
  }
  for (int j = 0; j < kBlock / 2; ++j) {
    at[j] = static_cast<unsigned char>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
  }
}

}  // namespace kvfuzz::cuda
