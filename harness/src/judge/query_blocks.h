// The query as ggml's CPU kernels hand it to a K stored in a ggml block format
// (EngineNumerics::query_blocks): quantized to the K type's vec_dot_type, q8_0 blocks of 32
// (q8_1 for q4_1 and q5_1 keys), tolerance.cpp step 14.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvfuzz/kv_format.h"

namespace kvfuzz {

// Whether a key of this format meets q8_1, whose block sum joins the dot product.
inline bool takes_q8_1(KvQuant key_format) {
  return key_format == KvQuant::q4_1 || key_format == KvQuant::q5_1;
}

struct QueryBlocks {
  // Per unit of ||k||, the logit error that stays ambiguous: elements whose quant ggml's x86
  // quantizer (x * 127 / amax) and its ARM one (x * (1 / d)) round apart (both to nearest,
  // ties to even), and (q8_1) what that does to the block sum. Cauchy-Schwarz: a logit moves
  // by at most scale * ambiguity * ||k||.
  double ambiguity = 0;
  // q8_1 only, per block: s - f16(d) * sum of the quants, s = f16(d * sum) as q8_1 stores it.
  // ggml's q4_1 / q5_1 dot product is sum_b (d_k d_q sum q_k q_q + m_b s_b), where the
  // dequantized key times the quantized query gives m_b f16(d) sum: the score is the
  // reference's plus sum_b m_b sum_error[b], m_b the key block's minimum.
  std::vector<double> sum_error;
};

// Replaces q (head_dim elements, a multiple of 32) with what ggml's q8_0 blocks read back,
// f16(d) * quant (x86's quants), and says what remains (above).
QueryBlocks quantize_query_blocks(double* q, size_t head_dim, KvQuant key_format);

// What the quantization leaves ambiguous when the engine's query may be anything in
// [lo[i], hi[i]] element by element (its own rotation under RoPE) where the reference's is
// `quantized` (what quantize_query_blocks made of it). Each element's quant may be anything
// the quantizer (x86's reciprocal or ARM's) makes of its range and its block's amax range
// (the steps are monotone: corners), so its value is off from the reference's by at most the
// width w_d of what it may read back, and a key k's score by sum_d w_d |k_d|. With q8_1 a
// block that may move also moves its sum term's error m_b (s - f16(d) sum) by at most
// |m_b| 2^-9 (|sum q| + sum w) (each side's is at most 2^-10 (1 + 2^-10) |d sum|, s's f16
// rounding and f16(d)'s; the engine's sum is within sum w of the reference's): sum_reach[b]
// holds the factor of |m_b| (for every block any of whose inputs may move: s rounds d * sum
// with d unrounded, which moves with amax). Each empty when nothing of it may move.
struct QueryReach {
  std::vector<double> width;      // per element
  std::vector<double> sum_reach;  // q8_1: per block, times |m_b|
};
QueryReach query_blocks_reach(const float* lo, const float* hi, const double* quantized,
                              size_t head_dim, KvQuant key_format);

// The block minima m of a row stored in q4_1 or q5_1, from what it reads back (`row`, n
// elements): one per 32 elements, each the least element of its block. The block's stored
// minimum is exactly that: its least element's quant is 0 (trunc(0 * id + 0.5)), reading
// back 0 * d + m = m, and every other q d + m is at least m.
void block_minima(const double* row, int n, double* out);

}  // namespace kvfuzz
