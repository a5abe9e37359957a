// ggml-cpu's quantize_row_q8_0 / q8_1 (arch/x86/quants.c, the AVX2 path every x86 build with
// AVX takes) against ggml's quantize_row_q8_0_ref / q8_1_ref (ggml-quants.c): both take
// d = amax / 127 in f32 and store it as f16; x86 multiplies by 127 / amax and rounds to
// nearest even, the reference multiplies by 1 / d and rounds half away from zero. q8_1 also
// stores s = f16(d * sum of the quants), with d unrounded.
#include "judge/query_blocks.h"

#include <algorithm>
#include <cmath>

#include "kvfuzz/dtype.h"

namespace kvfuzz {

double quantize_query_blocks(double* q, size_t head_dim, KvQuant key_format) {
  const bool q8_1 = key_format == KvQuant::q4_1 || key_format == KvQuant::q5_1;
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
    const float id_ref = d != 0.0f ? 1.0f / d : 0.0f;
    const double d16 = f16_to_f32(f32_to_f16(d));
    int sum_x86 = 0, sum_ref = 0;
    for (int i = 0; i < kGgmlBlock; ++i) {
      const float a = std::nearbyint(x[i] * id_x86);  // the default rounding: ties to even
      const float r = std::round(x[i] * id_ref);      // roundf: ties away from zero
      sum_x86 += static_cast<int>(a);
      sum_ref += static_cast<int>(r);
      q[b + static_cast<size_t>(i)] = d16 * a;
      const double apart = d16 * std::fabs(double{a} - double{r});
      ties += apart * apart;
    }
    if (q8_1) {
      // The key's minimum m times (s - d16 * sum): s is f16(d * sum) in both quantizers.
      double worst = 0;
      for (const int sum : {sum_x86, sum_ref}) {
        const double s = f16_to_f32(f32_to_f16(d * static_cast<float>(sum)));
        worst = std::max(worst, std::fabs(s - d16 * sum));
      }
      // The other quantizer's quants may differ by one at a tie: their sums then too.
      worst += d16 * std::abs(sum_x86 - sum_ref);
      sums += worst * worst;
    }
  }
  return std::sqrt(ties) + std::sqrt(sums);
}

}  // namespace kvfuzz
