// ggml-cpu's quantize_row_q8_0 / q8_1 as its SIMD builds compute them: all take d = amax / 127
// in f32 and store it as f16, and round x * id to nearest, ties to even; x86 (arch/x86/quants.c,
// the path every build with AVX takes) multiplies by id = 127 / amax, ARM NEON
// (arch/arm/quants.c) by id = 1 / d. The model is x86's; an element the two reciprocals round
// apart is ambiguous. (ggml's scalar fallback, quantize_row_q8_0_ref, rounds ties away from
// zero: a build without SIMD is not modelled.) q8_1 also stores s = f16(d * sum of the
// quants), with d unrounded.
#include "judge/query_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvfuzz/dtype.h"

namespace kvfuzz {

QueryBlocks quantize_query_blocks(double* q, size_t head_dim, KvQuant key_format) {
  const bool q8_1 = takes_q8_1(key_format);
  QueryBlocks out;
  double ties = 0, sums = 0;  // squared norms of the two ambiguous parts
  for (size_t b = 0; b + kGgmlBlock <= head_dim; b += kGgmlBlock) {
    float x[kGgmlBlock];
    float amax = 0;
    for (int i = 0; i < kGgmlBlock; ++i) {
      x[i] = static_cast<float>(q[b + static_cast<size_t>(i)]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    const float d = amax / 127.0f;
    const float id_x86 = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float id_arm = d != 0.0f ? 1.0f / d : 0.0f;
    const double d16 = f16_to_f32(f32_to_f16(d));
    int sum_x86 = 0, sum_ref = 0;
    for (int i = 0; i < kGgmlBlock; ++i) {
      // std::nearbyint: the default rounding, to nearest, ties to even
      const float a = std::nearbyint(x[i] * id_x86);
      const float r = std::nearbyint(x[i] * id_arm);
      sum_x86 += static_cast<int>(a);
      sum_ref += static_cast<int>(r);
      q[b + static_cast<size_t>(i)] = d16 * a;
      const double apart = d16 * std::fabs(double{a} - double{r});
      ties += apart * apart;
    }
    if (q8_1) {
      const auto sum_error = [&](int sum) {
        return f16_to_f32(f32_to_f16(d * static_cast<float>(sum))) - d16 * sum;
      };
      out.sum_error.push_back(sum_error(sum_x86));
      // ARM's quants, where they differ, move the sum term as well.
      const double apart =
          std::fabs(sum_error(sum_ref) + d16 * sum_ref - sum_error(sum_x86) - d16 * sum_x86);
      sums += apart * apart;
    }
  }
  out.ambiguity = std::sqrt(ties) + std::sqrt(sums);
  return out;
}

void block_minima(KvQuant format, const uint8_t* bytes, int n, double* out) {
  KvFormat blocks;
  blocks.quant = format;
  const size_t block = row_bytes(blocks, kGgmlBlock);
  for (int b = 0; b < n / kGgmlBlock; ++b) {
    uint16_t m = 0;  // block_q4_1 / block_q5_1: ggml_half d, then ggml_half m
    std::memcpy(&m, bytes + static_cast<size_t>(b) * block + 2, sizeof m);
    out[b] = f16_to_f32(m);
  }
}

}  // namespace kvfuzz
