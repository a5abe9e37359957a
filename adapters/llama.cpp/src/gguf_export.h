// kvfuzz's tiny transformer (kernels/model/transformer.h) written as a GGUF model of
// llama.cpp's "llama" architecture, with ggml's own GGUF writer: the model a llama.cpp user
// would load, so that llama.cpp computes the forward kvfuzz's double reference judges.
//
// What maps to what (README.md beside this folder):
//   embedding, RMSNorm gains, wq/wk/wv/wo, SwiGLU gate/up/down, final norm, LM head
//     -> token_embd, blk.N.attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down,
//        output_norm, output: f32, each matrix transposed from kvfuzz's row-major [in][out]
//        to ggml's ne = [in, out] (element (in, out) at out * in_size + in)
//   RoPE: kvfuzz rotates half-split (NeoX) pairs (i, i + d/2); the llama architecture
//     rotates adjacent pairs (2i, 2i + 1) at the same frequency theta^(-2i/d). Each head's q
//     and k output columns are permuted (kvfuzz lane i -> 2i, i + d/2 -> 2i + 1): q.k is a
//     sum over lanes, so the scores are unchanged and the rotation is the same.
//   softmax scale: llama reads no llama.attention.scale (its graph uses 1/sqrt(head_dim)),
//     so another scale s is folded into wq as the factor s * sqrt(head_dim) (exact when it
//     is a power of two; otherwise one f32 rounding per weight).
//   RMSNorm epsilon: kNormEps; RoPE base: rope_theta (as f32, what GGUF stores).
#pragma once

#include <string>

#include "kvfuzz/scenario.h"
#include "model/transformer.h"

namespace kvfuzz::llama_cpp {

// Deliberate mistakes for the adapter's negative controls (tests/adapters): each must make
// llama.cpp's logits fail against the reference.
struct ExportBugs {
  bool skip_rope_permutation = false;  // q and k written in kvfuzz's half-split lane order
  bool skip_scale_fold = false;        // the layout's scale left out of wq and wk
};

// Why the llama architecture cannot express `layout` (a sentence), or "" when it can: RoPE
// is required (llama checks rope.dimension_count == head_dim), windows are unsupported,
// and value_dim must equal head_dim (its graph asserts one head size).
std::string unexpressible(const Layout& layout);

// Writes the model to `path`; throws std::runtime_error naming what failed.
void write_gguf(const std::string& path, const ModelConfig& model, const Layout& layout,
                const TransformerWeights& weights, const ExportBugs& bugs = {});

}  // namespace kvfuzz::llama_cpp
