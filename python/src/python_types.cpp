#include "python_types.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/model_engine.h"
#include "model/transformer.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

// A per-q-head feature (Layout::sinks, alibi) for Python: a list, or None when off.
std::optional<std::vector<double>> per_head(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  return values;
}

// A quantized KV format (Layout::k_format, v_format) for Python, as the exec protocol sends
// it: {"type": "fp8_e4m3fn", "scales": [one per kv head]} ("scales" None for a ggml block
// format), or None when the cache stores the dtype.
nb::object kv_format(const KvFormat& format, int kv_heads) {
  if (!format.quantized()) return nb::none();
  nb::dict out;
  out["type"] = std::string(kv_quant_name(format.quant));
  if (is_fp8(format.quant)) {
    std::vector<double> scales;
    for (int g = 0; g < kv_heads; ++g) scales.push_back(format.scale_of(g));
    out["scales"] = scales;
  } else {
    out["scales"] = nb::none();
  }
  if (has_group(format.quant)) out["group"] = format.group;
  return out;
}

// A float32 numpy array of `shape` holding a copy of `values`.
nb::object weight_array(const std::vector<float>& values, std::vector<size_t> shape) {
  auto* copy = new float[values.size()];
  std::copy(values.begin(), values.end(), copy);
  nb::capsule owner(copy, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float>(copy, shape.size(), shape.data(), owner));
}

// The model's weights (kvfuzz/model/transformer.h: make_weights, the same bits the judge's
// reference uses) as float32 numpy arrays, [in][out] as x @ w multiplies them.
nb::dict weights_dict(const ModelEngineConfig& config) {
  const TransformerWeights w = make_weights(config.model, config.engine.layout);
  const Layout& l = config.engine.layout;
  const auto size = [](int n) { return static_cast<size_t>(n > 0 ? n : 0); };
  const size_t vocab = size(config.model.vocab), width = size(config.model.width),
               ffn = size(config.model.ffn);
  const size_t q = size(l.q_heads) * size(l.head_dim), k = size(l.kv_heads) * size(l.head_dim),
               v = size(l.kv_heads) * size(l.value_dim), a = size(l.q_heads) * size(l.value_dim);
  nb::dict out;
  out["embedding"] = weight_array(w.embedding, {vocab, width});
  nb::list layers;
  for (const TransformerWeights::Layer& layer : w.layers) {
    nb::dict d;
    d["attention_norm"] = weight_array(layer.attention_norm, {width});
    d["wq"] = weight_array(layer.wq, {width, q});
    d["wk"] = weight_array(layer.wk, {width, k});
    d["wv"] = weight_array(layer.wv, {width, v});
    d["wo"] = weight_array(layer.wo, {a, width});
    d["mlp_norm"] = weight_array(layer.mlp_norm, {width});
    d["w_gate"] = weight_array(layer.w_gate, {width, ffn});
    d["w_up"] = weight_array(layer.w_up, {width, ffn});
    d["w_down"] = weight_array(layer.w_down, {ffn, width});
    layers.append(d);
  }
  out["layers"] = layers;
  out["final_norm"] = weight_array(w.final_norm, {width});
  out["lm_head"] = weight_array(w.lm_head, {width, vocab});
  return out;
}

}  // namespace

void bind_engine_types(nb::module_& m) {
  nb::class_<EngineConfig>(m, "EngineConfig",
                           "What an engine is made for: the scenario's layout, its sequences and "
                           "its physical placement (the exec protocol's hello, as attributes).")
      .def_prop_ro("q_heads", [](const EngineConfig& c) { return c.layout.q_heads; })
      .def_prop_ro("kv_heads", [](const EngineConfig& c) { return c.layout.kv_heads; })
      .def_prop_ro(
          "group", [](const EngineConfig& c) { return c.layout.group(); },
          "q heads per kv head: q head h reads kv head h // group")
      .def_prop_ro("head_dim", [](const EngineConfig& c) { return c.layout.head_dim; })
      .def_prop_ro("value_dim", [](const EngineConfig& c) { return c.layout.value_dim; })
      .def_prop_ro("page_size", [](const EngineConfig& c) { return c.layout.page_size; })
      .def_prop_ro(
          "dtype", [](const EngineConfig& c) { return std::string(dtype_name(c.layout.dtype)); },
          "'f32', 'f16' or 'bf16': q, k and v are already rounded to it")
      .def_prop_ro("scale", [](const EngineConfig& c) { return c.layout.softmax_scale(); })
      .def_prop_ro(
          "rope_theta", [](const EngineConfig& c) { return c.layout.rope_theta; },
          "RoPE base, or None")
      .def_prop_ro(
          "rope_style",
          [](const EngineConfig& c) { return std::string(rope_style_name(c.layout.rope_style)); },
          "RoPE's pairs: 'half_split' ((x_i, x_{i+d/2}), NeoX's) or 'interleaved' ((x_2i, "
          "x_2i+1), GPT-J's; only to an engine whose supports say rope_interleaved)")
      .def_prop_ro(
          "rope_dims", [](const EngineConfig& c) { return c.layout.rope_dims; },
          "RoPE turns only the head's last rope_dims elements (MLA's decoupled RoPE part; "
          "only to an engine whose supports say rope_dims), or None: the whole head")
      .def_prop_ro(
          "window", [](const EngineConfig& c) { return c.layout.window; },
          "sliding window (the query at p sees keys p - window + 1 .. p), or None")
      .def_prop_ro(
          "softcap", [](const EngineConfig& c) { return c.layout.softcap; },
          "soft cap (logit -> softcap * tanh(logit / softcap), before ALiBi), or None")
      .def_prop_ro(
          "sinks", [](const EngineConfig& c) { return per_head(c.layout.sinks); },
          "one sink logit per q head (a softmax term without a value), or None")
      .def_prop_ro(
          "alibi", [](const EngineConfig& c) { return per_head(c.layout.alibi); },
          "one ALiBi slope per q head (logit += slope * (key pos - query pos)), or None")
      .def_prop_ro(
          "chunked_local", [](const EngineConfig& c) { return c.layout.chunked_local; },
          "chunked local attention (the query at p sees keys from p // C * C), or None")
      .def_prop_ro(
          "k_format",
          [](const EngineConfig& c) { return kv_format(c.layout.k_format, c.layout.kv_heads); },
          "how the cache stores K: {'type': 'fp8_e4m3fn' | 'fp8_e5m2' | 'q8_0' | 'q4_0' | "
          "'q4_1' | 'q5_0' | 'q5_1' | 'affine2' | 'affine4' | 'affine8' | 'channel_u8' | "
          "'channel_u4' (K only), 'scales': one per kv head (fp8) or None, and 'group' (affine: "
          "32, 64 or 128 elements; per-channel: 16, 32, 64 or 128 positions)}, or None (the "
          "dtype); "
          "kvfuzz.quantize_row gives the bytes")
      .def_prop_ro(
          "v_format",
          [](const EngineConfig& c) { return kv_format(c.layout.v_format, c.layout.kv_heads); },
          "how the cache stores V, as k_format")
      .def_prop_ro(
          "value_from_key", [](const EngineConfig& c) { return c.layout.value_from_key; },
          "MLA: each value is its key's first value_dim elements (the steps' v holds them), "
          "so the cache may keep the key's row alone")
      .def_prop_ro("sequences", [](const EngineConfig& c) { return c.sequences; })
      .def_prop_ro(
          "page_order", [](const EngineConfig& c) { return c.page_order; },
          "the order in which a paged engine hands out its physical pages")
      .def_prop_ro(
          "poison", [](const EngineConfig& c) { return std::string(poison_name(c.poison)); },
          "'nan', '+inf', '-inf' or 'huge': what unused cache slots should hold")
      .def("__repr__", [](const EngineConfig& c) {
        const Layout& l = c.layout;
        return "EngineConfig(q_heads=" + std::to_string(l.q_heads) +
               ", kv_heads=" + std::to_string(l.kv_heads) +
               ", head_dim=" + std::to_string(l.head_dim) +
               ", value_dim=" + std::to_string(l.value_dim) + ", dtype='" +
               std::string(dtype_name(l.dtype)) + "', sequences=" + std::to_string(c.sequences) +
               ")";
      });

  nb::class_<ModelConfig>(m, "ModelConfig",
                          "The tiny transformer's sizes and weights' seed (docs/fixture-format.md, "
                          "\"model\")")
      .def_ro("vocab", &ModelConfig::vocab, "token ids and logits per row")
      .def_ro("width", &ModelConfig::width, "the residual stream (d_model)")
      .def_ro("layers", &ModelConfig::layers)
      .def_ro("ffn", &ModelConfig::ffn, "SwiGLU's hidden width")
      .def_ro("seed", &ModelConfig::seed, "the weights' seed")
      .def("__repr__", [](const ModelConfig& c) {
        return "ModelConfig(vocab=" + std::to_string(c.vocab) +
               ", width=" + std::to_string(c.width) + ", layers=" + std::to_string(c.layers) +
               ", ffn=" + std::to_string(c.ffn) + ", seed=" + std::to_string(c.seed) + ")";
      });

  nb::class_<ModelEngineConfig>(
      m, "ModelEngineConfig",
      "What a whole-model engine is made for: every layer's attention (an EngineConfig: layout, "
      "sequences, placement) and the model (a ModelConfig); weights() gives its weights.")
      .def_ro("engine", &ModelEngineConfig::engine)
      .def_ro("model", &ModelEngineConfig::model)
      .def("weights", &weights_dict,
           "The model's weights as float32 numpy arrays, [in][out] (x @ w): embedding "
           "[vocab][width]; layers, each a dict of attention_norm [width], wq [width][q_heads * "
           "head_dim], wk and wv [width][kv_heads * head_dim or value_dim], wo [q_heads * "
           "value_dim][width], mlp_norm [width], w_gate and w_up [width][ffn], w_down "
           "[ffn][width]; final_norm [width]; lm_head [width][vocab]")
      .def("__repr__", [](const ModelEngineConfig& c) {
        return "ModelEngineConfig(vocab=" + std::to_string(c.model.vocab) +
               ", width=" + std::to_string(c.model.width) +
               ", layers=" + std::to_string(c.model.layers) +
               ", q_heads=" + std::to_string(c.engine.layout.q_heads) +
               ", kv_heads=" + std::to_string(c.engine.layout.kv_heads) +
               ", head_dim=" + std::to_string(c.engine.layout.head_dim) + ", dtype='" +
               std::string(dtype_name(c.engine.layout.dtype)) +
               "', sequences=" + std::to_string(c.engine.sequences) + ")";
      });

  nb::class_<ModelChunk>(m, "ModelChunk",
                         "One sequence's new tokens in a whole model's step: ids[token] (an "
                         "int32 numpy array the engine owns), vocabulary ids in [0, vocab)")
      .def_ro("seq", &ModelChunk::seq)
      .def_ro("tokens", &ModelChunk::tokens)
      .def_ro("ids", &ModelChunk::ids)
      .def("__repr__", [](const ModelChunk& c) {
        return "ModelChunk(seq=" + std::to_string(c.seq) + ", tokens=" + std::to_string(c.tokens) +
               ")";
      });

  nb::class_<Chunk>(m, "Chunk",
                    "One sequence's new tokens in a step: q[token, q_head, head_dim], "
                    "k[token, kv_head, head_dim], v[token, kv_head, value_dim] (float32 numpy "
                    "arrays the engine owns)")
      .def_ro("seq", &Chunk::seq)
      .def_ro("tokens", &Chunk::tokens)
      .def_ro("q", &Chunk::q)
      .def_ro("k", &Chunk::k)
      .def_ro("v", &Chunk::v)
      .def("__repr__", [](const Chunk& c) {
        return "Chunk(seq=" + std::to_string(c.seq) + ", tokens=" + std::to_string(c.tokens) + ")";
      });
}

}  // namespace kvfuzz::python
