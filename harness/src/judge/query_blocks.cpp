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
#include <limits>

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

QueryReach query_blocks_reach(const float* lo, const float* hi, const double* quantized,
                              size_t head_dim, KvQuant key_format) {
  const bool q8_1 = takes_q8_1(key_format);
  QueryReach out;
  out.width.assign(head_dim, 0.0);
  out.sum_reach.assign(q8_1 ? head_dim / kGgmlBlock : 0, 0.0);
  bool any = false, any_sum = false;
  for (size_t b = 0; b + kGgmlBlock <= head_dim; b += kGgmlBlock) {
    float amax_lo = 0, amax_hi = 0;
    for (size_t i = b; i < b + kGgmlBlock; ++i) {
      const float least =
          lo[i] <= 0 && hi[i] >= 0 ? 0.0f : std::min(std::fabs(lo[i]), std::fabs(hi[i]));
      amax_lo = std::max(amax_lo, least);
      amax_hi = std::max({amax_hi, std::fabs(lo[i]), std::fabs(hi[i])});
    }
    if (amax_hi == 0) continue;  // every element 0: every quant 0
    // Both reciprocals at both ends of amax (an amax of 0: the largest the quant may be).
    const float d_lo = amax_lo / 127.0f, d_hi = amax_hi / 127.0f;
    const float big = std::numeric_limits<float>::max();
    const float id_lo = std::min(127.0f / amax_hi, 1.0f / d_hi);
    const float id_hi = amax_lo > 0 ? std::max(127.0f / amax_lo, 1.0f / d_lo) : big;
    const float s_lo = f16_to_f32(f32_to_f16(d_lo)), s_hi = f16_to_f32(f32_to_f16(d_hi));
    double block_width = 0, block_sum = 0;
    for (size_t i = b; i < b + kGgmlBlock; ++i) {
      float q_lo = INFINITY, q_hi = -INFINITY;
      for (const float x : {lo[i], hi[i]}) {
        for (const float id : {id_lo, id_hi}) {
          const float quant = std::clamp(std::nearbyint(x * id), -127.0f, 127.0f);
          q_lo = std::min(q_lo, quant);
          q_hi = std::max(q_hi, quant);
        }
      }
      double v_lo = HUGE_VAL, v_hi = -HUGE_VAL;
      for (const float quant : {q_lo, q_hi}) {
        for (const float scale : {s_lo, s_hi}) {
          v_lo = std::min(v_lo, double{quant} * scale);
          v_hi = std::max(v_hi, double{quant} * scale);
        }
      }
      out.width[i] = v_hi - v_lo;
      block_width += out.width[i];
      block_sum += quantized[i];
    }
    any = any || block_width > 0;
    // The stored sum s = f16(d * sum) takes the unrounded d, which moves with amax even
    // where f16(d) and every quant stay: any input that may move moves the sum term.
    if (q8_1 && !std::equal(lo + b, lo + b + kGgmlBlock, hi + b)) {
      double moved = 0;
      if (block_width > 0) {
        moved = 0x1p-9 * (std::fabs(block_sum) + block_width);
      } else if (s_lo != 0) {
        // Every quant and f16(d) stay: only s moves, between the roundings of d * sum at
        // amax's two ends (exactly: the sums of integers are exact in f32).
        const auto sum = static_cast<float>(std::nearbyint(block_sum / s_lo));
        moved = std::fabs(double{f16_to_f32(f32_to_f16(d_hi * sum))} -
                          double{f16_to_f32(f32_to_f16(d_lo * sum))});
      }
      out.sum_reach[b / kGgmlBlock] = moved;
      any_sum = any_sum || moved > 0;
    }
  }
  if (!any) out.width.clear();
  if (!any_sum) out.sum_reach.clear();
  return out;
}

void block_minima(const double* row, int n, double* out) {
  for (int b = 0; b < n / kGgmlBlock; ++b) {
    const double* block = row + static_cast<size_t>(b) * kGgmlBlock;
    out[b] = *std::min_element(block, block + kGgmlBlock);
  }
}

}  // namespace kvfuzz
