// ggml's block formats in kernel code (kvfuzz/kv_format.h: q8_0, q4_0, q4_1, q5_0, q5_1):
// a row of one K or V head stored as blocks of 32 elements, each an f16 scale (and minimum)
// and its quants, written as ggml's reference quantizers write them and read back as its
// dequantizers read them. The same steps as scenario/kv_format.cpp's, on the device and
// the SIMT launcher alike; tests/cuda/test_cuda_engines.cpp holds them to those bit for bit.
#pragma once

#include "cuda/cuda_compat.h"
#include "cuda/dtype.cuh"

namespace kvfuzz::cuda {

constexpr int kBlock = 32;

KVFUZZ_HOST_DEVICE bool is_block_type(int type) {
  return type >= kStorageQ8_0;
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
// Bytes of a row of `width` elements (a multiple of 32).
KVFUZZ_HOST_DEVICE long long block_row_bytes(int type, int width) {
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

// Element d of a row stored in blocks: q d (q8_0), (q - 8) d, (q - 16) d, or q d + m.
KVFUZZ_DEVICE float load_block_element(const unsigned char* row, int d, int type) {
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
  const float value = static_cast<float>(q - zero) * scale;
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
