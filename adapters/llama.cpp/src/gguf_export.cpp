#include "gguf_export.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "model/model_math.h"

namespace kvfuzz::llama_cpp {

namespace {

struct GgufFree {
  void operator()(gguf_context* c) const { gguf_free(c); }
};
struct GgmlFree {
  void operator()(ggml_context* c) const { ggml_free(c); }
};

// kvfuzz's row-major [rows = in][cols = out] as ggml's ne = [in, out]: out-major.
std::vector<float> transposed(const std::vector<float>& w, size_t in, size_t out) {
  std::vector<float> t(in * out);
  for (size_t r = 0; r < in; ++r)
    for (size_t c = 0; c < out; ++c) t[c * in + r] = w[r * out + c];
  return t;
}

// The llama lane that kvfuzz lane `i` of a head of `d` lanes goes to.
size_t llama_lane(size_t i, size_t d) {
  return i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1;
}

// Each head's output columns of a [in][heads * d] matrix moved to llama's lane order.
std::vector<float> permuted_columns(const std::vector<float>& w, size_t in, size_t heads,
                                    size_t d) {
  std::vector<float> p(w.size());
  const size_t cols = heads * d;
  for (size_t r = 0; r < in; ++r)
    for (size_t h = 0; h < heads; ++h)
      for (size_t i = 0; i < d; ++i)
        p[r * cols + h * d + llama_lane(i, d)] = w[r * cols + h * d + i];
  return p;
}

class Writer {
 public:
  explicit Writer(size_t bytes) {
    ggml_init_params params{};
    params.mem_size = bytes;
    params.no_alloc = false;
    tensors_.reset(ggml_init(params));
    gguf_.reset(gguf_init_empty());
    if (!tensors_ || !gguf_) throw std::runtime_error("ggml_init or gguf_init_empty failed");
  }
  gguf_context* gguf() { return gguf_.get(); }

  // A tensor of ne = [ne0] or [ne0, ne1] holding `data` (ne0 contiguous).
  void add(const std::string& name, const std::vector<float>& data, int64_t ne0, int64_t ne1 = 1) {
    if (data.size() != static_cast<size_t>(ne0 * ne1))
      throw std::runtime_error("tensor " + name + ": size does not match its shape");
    ggml_tensor* t = ne1 == 1 ? ggml_new_tensor_1d(tensors_.get(), GGML_TYPE_F32, ne0)
                              : ggml_new_tensor_2d(tensors_.get(), GGML_TYPE_F32, ne0, ne1);
    if (!t) throw std::runtime_error("tensor " + name + ": out of ggml memory");
    ggml_set_name(t, name.c_str());
    std::memcpy(t->data, data.data(), data.size() * sizeof(float));
    gguf_add_tensor(gguf_.get(), t);
  }

 private:
  std::unique_ptr<ggml_context, GgmlFree> tensors_;
  std::unique_ptr<gguf_context, GgufFree> gguf_;
};

int64_t i64(size_t n) {
  return static_cast<int64_t>(n);
}

size_t weight_floats(const TransformerWeights& w) {
  size_t n = w.embedding.size() + w.final_norm.size() + w.lm_head.size();
  for (const auto& l : w.layers) {
    n += l.attention_norm.size() + l.wq.size() + l.wk.size() + l.wv.size() + l.wo.size() +
         l.mlp_norm.size() + l.w_gate.size() + l.w_up.size() + l.w_down.size();
  }
  return n;
}

}  // namespace

std::string unexpressible(const Layout& layout) {
  if (!layout.rope_theta) return "no RoPE (llama requires rope.dimension_count == head_dim)";
  if (layout.window) return "a sliding window (the llama architecture has none)";
  if (layout.value_dim != layout.head_dim)
    return "value_dim " + std::to_string(layout.value_dim) + " != head_dim " +
           std::to_string(layout.head_dim) + " (llama has one head size)";
  return "";
}

void write_gguf(const std::string& path, const ModelConfig& model, const Layout& layout,
                const TransformerWeights& weights, const ExportBugs& bugs) {
  if (const std::string why = unexpressible(layout); !why.empty())
    throw std::runtime_error("the llama architecture cannot express " + why);
  const model::Dims d = model::dims_of(model, layout);
  if (weights.layers.size() != d.layers) throw std::runtime_error("weights: wrong layer count");
  const auto u32 = [](size_t n) { return static_cast<uint32_t>(n); };

  // Tensor data plus ggml's per-tensor overhead, with room to spare.
  Writer out(weight_floats(weights) * sizeof(float) +
             (4 + 9 * d.layers) * (ggml_tensor_overhead() + 64) + (1 << 16));
  gguf_context* g = out.gguf();
  gguf_set_val_str(g, "general.architecture", "llama");
  gguf_set_val_str(g, "general.name", "kvfuzz tiny transformer");
  gguf_set_val_u32(g, "llama.vocab_size", u32(d.vocab));
  gguf_set_val_u32(g, "llama.context_length", 1u << 16);
  gguf_set_val_u32(g, "llama.embedding_length", u32(d.width));
  gguf_set_val_u32(g, "llama.block_count", u32(d.layers));
  gguf_set_val_u32(g, "llama.feed_forward_length", u32(d.ffn));
  gguf_set_val_u32(g, "llama.attention.head_count", u32(d.q_heads));
  gguf_set_val_u32(g, "llama.attention.head_count_kv", u32(d.kv_heads));
  gguf_set_val_u32(g, "llama.attention.key_length", u32(d.head_dim));
  gguf_set_val_u32(g, "llama.attention.value_length", u32(d.value_dim));
  gguf_set_val_u32(g, "llama.rope.dimension_count", u32(d.head_dim));
  gguf_set_val_f32(g, "llama.rope.freq_base", static_cast<float>(*layout.rope_theta));
  gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon",
                   static_cast<float>(model::kNormEps));
  // No tokenizer: llama.cpp then makes vocab_size dummy tokens, and ids go in as they are.
  gguf_set_val_str(g, "tokenizer.ggml.model", "none");

  const size_t W = d.width, F = d.ffn, hd = d.head_dim;
  // llama's graph scales q.k by 1/sqrt(head_dim) (the llama architecture reads no
  // attention.scale): the layout's scale goes into wq and wk, half its factor each. All of
  // it in wq made a large scale's q (1024 sqrt(32) = 5793 times the model's) overflow
  // f16 where ggml rounds q: the f16 sum of a q8_1 block, against q4_1 and q5_1 keys, went
  // to inf and the logits to NaN (docs/findings/llama.cpp.md); and a small scale's q8_0
  // block scales into f16's subnormals.
  const double fold = std::sqrt(layout.softmax_scale() * std::sqrt(static_cast<double>(hd)));
  out.add("token_embd.weight", weights.embedding, i64(W), i64(d.vocab));
  for (size_t l = 0; l < d.layers; ++l) {
    const TransformerWeights::Layer& w = weights.layers[l];
    const std::string blk = "blk." + std::to_string(l) + ".";
    std::vector<float> wq = w.wq, wk = w.wk;
    if (fold != 1.0 && !bugs.skip_scale_fold) {
      for (float& x : wq) x = static_cast<float>(x * fold);
      for (float& x : wk) x = static_cast<float>(x * fold);
    }
    if (!bugs.skip_rope_permutation) {
      wq = permuted_columns(wq, W, d.q_heads, hd);
      wk = permuted_columns(wk, W, d.kv_heads, hd);
    }
    out.add(blk + "attn_norm.weight", w.attention_norm, i64(W));
    out.add(blk + "attn_q.weight", transposed(wq, W, d.q_size()), i64(W), i64(d.q_size()));
    out.add(blk + "attn_k.weight", transposed(wk, W, d.k_size()), i64(W), i64(d.k_size()));
    out.add(blk + "attn_v.weight", transposed(w.wv, W, d.v_size()), i64(W), i64(d.v_size()));
    out.add(blk + "attn_output.weight", transposed(w.wo, d.attention_size(), W),
            i64(d.attention_size()), i64(W));
    out.add(blk + "ffn_norm.weight", w.mlp_norm, i64(W));
    out.add(blk + "ffn_gate.weight", transposed(w.w_gate, W, F), i64(W), i64(F));
    out.add(blk + "ffn_up.weight", transposed(w.w_up, W, F), i64(W), i64(F));
    out.add(blk + "ffn_down.weight", transposed(w.w_down, F, W), i64(F), i64(W));
  }
  out.add("output_norm.weight", weights.final_norm, i64(W));
  out.add("output.weight", transposed(weights.lm_head, W, d.vocab), i64(W), i64(d.vocab));
  if (!gguf_write_to_file(g, path.c_str(), false))
    throw std::runtime_error("gguf_write_to_file(" + path + ") failed");
}

}  // namespace kvfuzz::llama_cpp
