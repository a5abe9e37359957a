// The tiny transformer's weights, from ModelConfig::seed with the project's PRNG.
//
// Every weight is uniform_from_bits (a multiple of 2^-23 in [-1, 1), variance 1/3) times
// sqrt(3 / fan_in), rounded to float: variance 1 / fan_in, so each projection keeps its
// input's scale (LeCun init) and activations stay O(1) through the layers. sqrt and the
// product are correctly rounded IEEE operations, so the weights are bit-identical on every
// machine. RMSNorm gains are 1 + uniform / 8, in [0.875, 1.125), exact in float. The draw
// order (embedding; per layer attention_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up,
// w_down; final_norm, lm_head; each row-major) is part of the model's definition: changing
// it changes every model fixture.
#include <cmath>

#include "kvfuzz/dtype.h"
#include "kvfuzz/prng.h"
#include "model/model_math.h"

namespace kvfuzz {

namespace model {

Dims dims_of(const ModelConfig& model, const Layout& layout) {
  const auto size = [](int n) { return static_cast<size_t>(n > 0 ? n : 0); };
  return Dims{size(model.vocab),     size(model.width),     size(model.ffn),
              size(model.layers),    size(layout.q_heads),  size(layout.kv_heads),
              size(layout.head_dim), size(layout.value_dim)};
}

}  // namespace model

namespace {

class Filler {
 public:
  explicit Filler(uint64_t seed) : rng_(seed) {}

  std::vector<float> matrix(size_t rows, size_t cols, size_t fan_in) {
    const double scale = std::sqrt(3.0 / static_cast<double>(fan_in > 0 ? fan_in : 1));
    std::vector<float> w(rows * cols);
    for (float& x : w) x = static_cast<float>(uniform_from_bits(rng_.next()) * scale);
    return w;
  }

  std::vector<float> gain(size_t n) {
    std::vector<float> g(n);
    for (float& x : g) x = 1.0f + uniform_from_bits(rng_.next()) * 0x1p-3f;
    return g;
  }

 private:
  Xoshiro256 rng_;
};

}  // namespace

TransformerWeights make_weights(const ModelConfig& model, const Layout& layout) {
  const model::Dims d = model::dims_of(model, layout);
  Filler fill(model.seed);
  TransformerWeights w;
  w.embedding = fill.matrix(d.vocab, d.width, 1);
  w.layers.resize(d.layers);
  for (TransformerWeights::Layer& layer : w.layers) {
    layer.attention_norm = fill.gain(d.width);
    layer.wq = fill.matrix(d.width, d.q_size(), d.width);
    layer.wk = fill.matrix(d.width, d.k_size(), d.width);
    layer.wv = fill.matrix(d.width, d.v_size(), d.width);
    layer.wo = fill.matrix(d.attention_size(), d.width, d.attention_size());
    layer.mlp_norm = fill.gain(d.width);
    layer.w_gate = fill.matrix(d.width, d.ffn, d.width);
    layer.w_up = fill.matrix(d.width, d.ffn, d.width);
    layer.w_down = fill.matrix(d.ffn, d.width, d.ffn);
  }
  w.final_norm = fill.gain(d.width);
  w.lm_head = fill.matrix(d.width, d.vocab, d.width);
  return w;
}

TransformerWeights rounded_weights(TransformerWeights weights, DType dtype) {
  if (dtype == DType::f32) return weights;
  const auto round = [dtype](std::vector<float>& values) {
    for (float& x : values) x = round_to_dtype(x, dtype);
  };
  round(weights.embedding);
  for (TransformerWeights::Layer& layer : weights.layers) {
    for (std::vector<float>* values :
         {&layer.attention_norm, &layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.mlp_norm,
          &layer.w_gate, &layer.w_up, &layer.w_down}) {
      round(*values);
    }
  }
  round(weights.final_norm);
  round(weights.lm_head);
  return weights;
}

}  // namespace kvfuzz
