// The model level's oracle, beside the attention oracle on the judge's side: the tiny
// transformer (kernels/model/transformer.h) evaluated on every (sequence, epoch) stream's
// full prefix, in double, with no cache (reference_forward.cpp), and the same evaluation
// perturbed where an honest cached forward rounds (model_tolerance.cpp).
#pragma once

#include <cstdint>
#include <map>

#include "kvfuzz/kv_format.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "model/transformer.h"

namespace kvfuzz {

// Keyed by (seq, epoch, position); `origin` is that of the program's token.
std::map<RowKey, TransformerRow> reference_transformer(const Scenario& scenario,
                                                       const TransformerWeights& weights);

namespace model {

// Relative noise injected into a reference evaluation to model the rounding an honest
// cached forward does (harness/src/model/model_tolerance.cpp decides the magnitudes and
// says why). Every term multiplies a uniform draw in [-1, 1): a hash (the project's
// splitmix64) of `seed`, the place and the value perturbed, so equal values are perturbed
// alike, as rounding does.
struct Perturbation {
  uint64_t seed = 0;
  double qkv = 0;         // q, k, v elements: qkv * |x| (rounding to the layout's dtype)
  double projection = 0;  // every matrix-vector product: projection * sqrt(fan_in) * rms(out)
  double rope = 0;        // rotated q and k: (rope + rope_per_position * p) * rms(head)
  double rope_per_position = 0;
  double k_store = 0;    // rotated k stored again in the dtype: k_store * |x| (RoPE only)
  double attention = 0;  // attention output: attention * (2 sqrt(n) + 4) * max |v| visible
  // Declared numerics (EngineNumerics; model_tolerance.cpp says which declaration sets
  // which term):
  double q_store = 0;          // rotated q rounded to the dtype: q_store * |x| (RoPE only)
  double score_sum = 0;        // each score: score_sum * 2 sqrt(head_dim) * scale * sum |q_i k_i|
  double p_round = 0;          // each softmax weight: p_round * |w|
  double attention_round = 0;  // each attention output value: attention_round * |x|
  double logits_round = 0;     // each logit: logits_round * |x|
  // A whole model's activations in a narrower dtype (EngineNumerics::activations): every
  // product, norm, residual sum and SwiGLU product of every row, relative, times the
  // roundings each place makes (reference_forward.cpp, activation_roundings); q, k and v
  // by activations_qkv (0 where the layout's dtype already rounds them as coarsely).
  double activations = 0;
  double activations_qkv = 0;
  // The cache's quantized formats (Layout::k_format, v_format: ggml's blocks, MLX's affine
  // groups): every stored element (the key after RoPE) moved as its block or group stores
  // it (stored_errors: a fixed shift and noise; an affine group's scale and bias in stored_dtype),
  // and with q_blocks (EngineNumerics::query_blocks over ggml block keys) every q element by
  // its q8_0 block's. A format of none: no term.
  KvFormat k_stored, v_stored;
  DType stored_dtype = DType::f32;
  bool q_blocks = false;
};

// What each element of one block of 32 or affine group (`x`, n elements) reads back as when
// stored in `format`, as ggml-quants.c's quantizers or MLX's `quantize` store it
// (kvfuzz/kv_format.h's encoders, which are those): x_i + shift_i + e_i with |e_i| <=
// noise_i. The shift is the part fixed by the block's values alone, the same in every
// block of that shape (the elements q4_0 and q5_0 clamp to their largest quant, affine
// elements beyond MLX's snapped grid, read back as its end); the noise the rest: half a
// step, the scale's (and q4_1's and q5_1's minimum's) rounding to f16, an affine group's
// scale and bias rounded to `dtype`, and near a half, either way MLX's snap may go.
void stored_errors(const KvFormat& format, DType dtype, const double* x, size_t n, double* shift,
                   double* noise);
// A q8_0 / q8_1 block of the query (ggml's vec_dot type for block keys), whose f16 block
// sum joins the q4_1 and q5_1 dot products: no shift, half a step and the sum's rounding.
void query_block_errors(const double* x, size_t n, double* shift, double* noise);

// The reference evaluation, optionally perturbed: every (sequence, epoch) stream on its full
// prefix, in double. `perturbation` null: the exact reference (reference_transformer).
std::map<RowKey, TransformerRow> evaluate_reference(const Scenario& scenario,
                                                    const TransformerWeights& weights,
                                                    const Perturbation* perturbation);

}  // namespace model

}  // namespace kvfuzz
