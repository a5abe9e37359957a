// The query as ggml's CPU kernels hand it to a K stored in a ggml block format
// (EngineNumerics::query_blocks): quantized to the K type's vec_dot_type, q8_0 blocks of 32
// (q8_1 for q4_1 and q5_1 keys), tolerance.cpp step 14.
#pragma once

#include <cstddef>

#include "kvfuzz/kv_format.h"

namespace kvfuzz {

// Replaces q (head_dim elements, a multiple of 32) with what ggml's q8_0 blocks read back,
// f16(d) * quant, and returns the part of the logit error per unit of ||k|| that stays
// ambiguous: elements whose quant ggml's x86 quantizer (127 / amax, ties to even) and its
// reference one (1 / d, ties away from zero) round apart, and, for a q4_1 or q5_1 key, the
// block sum s that q8_1 stores rounded to f16 apart from the quants (it meets the key's
// block minimum m, |m| <= ||k_block||). Cauchy-Schwarz: a logit moves by at most
// scale * returned * ||k||.
double quantize_query_blocks(double* q, size_t head_dim, KvQuant key_format);

}  // namespace kvfuzz
