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

// The block minima m of one row stored in q4_1 or q5_1 (`bytes`, row_bytes(format, n)), one
// per 32 elements, as ggml's blocks store them (f16, after the scale).
void block_minima(KvQuant format, const uint8_t* bytes, int n, double* out);

}  // namespace kvfuzz
