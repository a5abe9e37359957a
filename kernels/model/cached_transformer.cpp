// The cached forward, one step at a time (model/cached_transformer.h). Float arithmetic
// throughout; q, k and v are rounded to the layout's dtype before they reach the engine
// (every engine input is representable in its storage), and the engine applies RoPE at
// the positions it assigns itself: the model hands it unrotated q and k.
#include "model/cached_transformer.h"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <utility>

#include "kvfuzz/dtype.h"

namespace kvfuzz::model {

namespace {

std::vector<double> widen(const float* x, size_t n) {
  return std::vector<double>(x, x + n);
}

// The `rounded` of a model computing in a narrower dtype: each place's values rounded to it.
struct RoundedTo {
  DType dtype;
  void operator()(Product /*product*/, float* values, size_t n, size_t /*fan_in*/) const {
    for (size_t i = 0; i < n; ++i) values[i] = round_to_dtype(values[i], dtype);
  }
};

}  // namespace

template <class Rows>
void CachedTransformer::with_rounding(Rows&& rows) const {
  if (activations_ == DType::f32) {
    rows(Unrounded{});
  } else {
    rows(RoundedTo{activations_});
  }
}

CachedTransformer::CachedTransformer(const TransformerWeights& weights, const ModelConfig& model,
                                     const EngineConfig& config,
                                     std::span<const EngineInfo* const> layer_engines,
                                     DType activations)
    : weights_(weights),
      d_(dims_of(model, config.layout)),
      layout_(config.layout),
      activations_(activations) {
  if (weights.layers.size() != d_.layers || layer_engines.size() != d_.layers) {
    throw LayerFailure("the model has " + std::to_string(d_.layers) + " layers, the weights " +
                           std::to_string(weights.layers.size()) + " and the engines " +
                           std::to_string(layer_engines.size()),
                       -1);
  }
  engines_.resize(d_.layers);
  for (size_t l = 0; l < d_.layers; ++l) {
    try {
      if (layer_engines[l] == nullptr || !layer_engines[l]->make) {
        throw EngineError("no attention engine for this layer");
      }
      engines_[l] = layer_engines[l]->make(config);
      if (!engines_[l]) throw EngineError("the factory returned no engine");
    } catch (const std::exception& e) {
      throw LayerFailure(std::string("engine could not be made: ") + e.what(), static_cast<int>(l));
    }
  }
}

void CachedTransformer::history(const Op& op) {
  for (size_t l = 0; l < engines_.size(); ++l) {
    try {
      apply_history_op(*engines_[l], op);
    } catch (const std::exception& e) {
      throw LayerFailure("engine threw on " + describe_history_op(op) + ": " + e.what(),
                         static_cast<int>(l));
    }
  }
}

std::vector<StepRow> CachedTransformer::step(std::span<const ModelChunkIn> chunks) {
  const size_t total = embed(chunks);
  std::vector<StepRow> rows(total);
  for (size_t l = 0; l < d_.layers; ++l) {
    project_qkv(l, total);
    attend(l, chunks, rows);
    feed_forward(l, rows);
  }
  with_rounding([&](auto rounded) {
    rows_logits(h_.data(), total, weights_, d_, n_.data(), logits_.data(), rounded);
  });
  for (size_t r = 0; r < total; ++r)
    rows[r].logits = widen(logits_.data() + r * d_.vocab, d_.vocab);
  return rows;
}

size_t CachedTransformer::embed(std::span<const ModelChunkIn> chunks) {
  const size_t W = d_.width;
  chunk_first_.clear();
  size_t total = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    chunk_first_.push_back(total);
    for (const int id : chunks[c].ids) {
      if (id < 0 || static_cast<size_t>(id) >= d_.vocab) {
        throw LayerFailure("token id " + std::to_string(id) + " is not in the vocabulary (" +
                               std::to_string(d_.vocab) + " ids)",
                           -1, static_cast<int>(c));
      }
    }
    total += chunks[c].ids.size();
  }
  chunk_first_.push_back(total);
  h_.resize(total * W);
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (size_t t = 0; t < chunks[c].ids.size(); ++t) {
      const auto id = static_cast<size_t>(chunks[c].ids[t]);
      std::copy_n(weights_.embedding.begin() + static_cast<std::ptrdiff_t>(id * W), W,
                  h_.begin() + static_cast<std::ptrdiff_t>((chunk_first_[c] + t) * W));
    }
  }
  n_.resize(total * W);
  q_.resize(total * d_.q_size());
  k_.resize(total * d_.k_size());
  v_.resize(total * d_.v_size());
  attn_.resize(total * d_.attention_size());
  o_.resize(total * W);
  gate_.resize(total * d_.ffn);
  up_.resize(total * d_.ffn);
  logits_.resize(total * d_.vocab);
  return total;
}

void CachedTransformer::project_qkv(size_t l, size_t total) {
  const TransformerWeights::Layer& w = weights_.layers[l];
  with_rounding([&](auto rounded) {
    rows_qkv(h_.data(), total, w, d_, n_.data(), q_.data(), k_.data(), v_.data(), rounded);
  });
  for (float& x : q_) x = round_to_dtype(x, layout_.dtype);
  for (float& x : k_) x = round_to_dtype(x, layout_.dtype);
  for (float& x : v_) x = round_to_dtype(x, layout_.dtype);
}

// Not shared with the reference (harness/src/model/reference_forward.cpp), unlike the
// arithmetic around it (model_math.h's row functions): here the attention is the engine
// under test's, through its cache; there it is the oracle's own, on the full prefix in
// double. Sharing it would judge an engine by itself.
void CachedTransformer::attend(size_t l, std::span<const ModelChunkIn> chunks,
                               std::vector<StepRow>& rows) {
  const int layer = static_cast<int>(l);
  const size_t qs = d_.q_size(), ks = d_.k_size(), vs = d_.v_size(), as = d_.attention_size();
  ins_.clear();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const size_t at = chunk_first_[c], count = chunk_first_[c + 1] - at;
    ChunkIn in;
    in.seq = chunks[c].seq;
    in.tokens = static_cast<int>(count);
    in.q = std::span<const float>(q_).subspan(at * qs, count * qs);
    in.k = std::span<const float>(k_).subspan(at * ks, count * ks);
    in.v = std::span<const float>(v_).subspan(at * vs, count * vs);
    ins_.push_back(in);
  }
  outs_.assign(ins_.size(), ChunkOut{});
  try {
    engines_[l]->step(std::span<const ChunkIn>(ins_), std::span<ChunkOut>(outs_));
  } catch (const EngineError& e) {
    throw LayerFailure(std::string("engine threw: ") + e.what(), layer, -1, e.kind);
  } catch (const std::exception& e) {
    throw LayerFailure(std::string("engine threw: ") + e.what(), layer);
  }
  for (size_t c = 0; c < ins_.size(); ++c) {
    const size_t at = chunk_first_[c], count = chunk_first_[c + 1] - at;
    if (outs_[c].out.size() != count * as || outs_[c].positions.size() != count) {
      throw LayerFailure("engine returned a wrongly shaped chunk " + std::to_string(c) + " (seq " +
                             std::to_string(ins_[c].seq) + ", " + std::to_string(count) +
                             " tokens): " + std::to_string(outs_[c].out.size()) + " values and " +
                             std::to_string(outs_[c].positions.size()) + " positions; expected " +
                             std::to_string(count * as) + " values and " + std::to_string(count) +
                             " positions",
                         layer, static_cast<int>(c));
    }
    std::copy(outs_[c].out.begin(), outs_[c].out.end(),
              attn_.begin() + static_cast<std::ptrdiff_t>(at * as));
    for (size_t t = 0; t < count; ++t) rows[at + t].positions.push_back(outs_[c].positions[t]);
  }
}

void CachedTransformer::feed_forward(size_t l, std::vector<StepRow>& rows) {
  const TransformerWeights::Layer& w = weights_.layers[l];
  const size_t W = d_.width, as = d_.attention_size();
  if (activations_ != DType::f32) {
    for (float& x : attn_) x = round_to_dtype(x, activations_);
  }
  for (size_t r = 0; r < rows.size(); ++r)
    rows[r].attention.push_back(widen(attn_.data() + r * as, as));
  with_rounding([&](auto rounded) {
    rows_mlp(attn_.data(), rows.size(), w, d_, h_.data(), n_.data(), o_.data(), gate_.data(),
             up_.data(), rounded);
  });
  for (size_t r = 0; r < rows.size(); ++r) rows[r].hidden.push_back(widen(h_.data() + r * W, W));
}

}  // namespace kvfuzz::model
