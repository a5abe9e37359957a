// A whole-model engine over the tiny transformer's cached forward (model/cached_transformer.h):
// each layer's attention is one built-in CPU engine holding that layer's cache, so the
// engine computes exactly what the model level's own cached forward computes, behind the
// ids-in, logits-out door. The mutants override one history operation.
#include <algorithm>
#include <memory>
#include <string>

#include "cpu/contiguous_engine.h"
#include "cpu/flash_engine.h"
#include "cpu/numerics_profiles.h"
#include "cpu/paged_engine.h"
#include "model/cached_transformer.h"
#include "model/engines/model_engines.h"

namespace kvfuzz::model_engines {

namespace {

// Every layer engine stores ggml's blocks and the affine groups (the CPU engines declare
// every format), which the model level models (model_tolerance.cpp).
EngineSupports supports_of(Arithmetic arithmetic) {
  EngineSupports supports{.kv_ggml_blocks = true, .kv_affine = true};
  if (arithmetic != Arithmetic::f32) supports.dtypes = {DType::f32, DType::f16};
  return supports;
}

// The layer engine of each arithmetic, declaring and computing with its numerics. Rows stay
// f32: the model engine's declared output is its logits', and what a layer rounds inside
// is declared by p, value_accumulation and the rotated keys and queries.
EngineFactory layer_factory(Arithmetic arithmetic) {
  static const cpu::NumericsProfile p_f16{"model-p-f16", "P rounded to f16, f32 rows",
                                          declared_numerics(Arithmetic::p_f16),
                                          supports_of(Arithmetic::p_f16)};
  static const cpu::NumericsProfile acc_f16{"model-acc-f16", "P.V summed in f16, f32 rows",
                                            declared_numerics(Arithmetic::acc_f16),
                                            supports_of(Arithmetic::acc_f16)};
  switch (arithmetic) {
    case Arithmetic::p_f16:
      return [](const EngineConfig& config) {
        return cpu::with_numerics(std::make_unique<cpu::FlashEngine>(config), p_f16);
      };
    case Arithmetic::acc_f16:
      return [](const EngineConfig& config) {
        return cpu::with_numerics(std::make_unique<cpu::ContiguousEngine>(config), acc_f16);
      };
    case Arithmetic::f32:
      break;
  }
  return [](const EngineConfig& config) { return std::make_unique<cpu::PagedEngine>(config); };
}

EngineInfo layer_info(Arithmetic arithmetic) {
  EngineInfo info;
  info.name = "layer";
  info.make = layer_factory(arithmetic);
  return info;
}

class CachedModelEngine final : public ModelEngine {
 public:
  CachedModelEngine(const ModelEngineConfig& config, Arithmetic arithmetic, Bug bug,
                    DType activations)
      : arithmetic_(arithmetic),
        bug_(bug),
        activations_(activations),
        weights_(rounded_weights(make_weights(config.model, config.engine.layout), activations)),
        layer_(layer_info(arithmetic)),
        layers_(static_cast<size_t>(std::max(0, config.model.layers)), &layer_),
        forward_(weights_, config.model, config.engine, layers_, activations),
        lengths_(static_cast<size_t>(std::max(0, config.engine.sequences)), 0) {}

  EngineCapabilities capabilities() const override { return {.truncate = true, .fork = true}; }
  EngineNumerics numerics() const override {
    EngineNumerics numerics = declared_numerics(arithmetic_);
    numerics.activations = activations_;
    return numerics;
  }
  EngineSupports supports() const override { return supports_of(arithmetic_); }

  void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) override {
    if (outs.size() != chunks.size()) throw EngineError("outs.size() != chunks.size()");
    const std::vector<model::StepRow> rows = forward_.step(chunks);
    size_t r = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      ModelChunkOut& out = outs[c];
      out.logits.clear();
      out.positions.clear();
      for (size_t t = 0; t < chunks[c].ids.size(); ++t, ++r) {
        const model::StepRow& row = rows[r];
        // Every layer's cache places the token alike; one that does not is a bug of ours.
        for (const int64_t p : row.positions) {
          if (p != row.positions.front()) throw EngineError("the layers disagree on a position");
        }
        out.positions.push_back(row.positions.empty() ? -1 : row.positions.front());
        for (const double x : row.logits) out.logits.push_back(static_cast<float>(x));
      }
      length(chunks[c].seq) += static_cast<int64_t>(chunks[c].ids.size());
    }
  }

  void reset(int seq) override {
    forward_.history(Op::reset(seq));
    length(seq) = 0;
  }

  void truncate(int seq, int64_t keep) override {
    if (bug_ == Bug::truncate_keeps_one && keep < length(seq)) ++keep;
    forward_.history(Op::truncate(seq, keep));
    length(seq) = keep;
  }

  void fork(int src, int dst) override {
    if (bug_ == Bug::fork_from_self) return;
    forward_.history(Op::fork(src, dst));
    length(dst) = length(src);
  }

 private:
  int64_t& length(int seq) {
    if (seq < 0 || static_cast<size_t>(seq) >= lengths_.size()) {
      throw EngineError("sequence " + std::to_string(seq) + " out of range");
    }
    return lengths_[static_cast<size_t>(seq)];
  }

  Arithmetic arithmetic_;
  Bug bug_;
  DType activations_;
  TransformerWeights weights_;
  EngineInfo layer_;
  std::vector<const EngineInfo*> layers_;
  model::CachedTransformer forward_;
  std::vector<int64_t> lengths_;  // tokens per sequence, for the mutants
};

}  // namespace

EngineNumerics declared_numerics(Arithmetic arithmetic) {
  switch (arithmetic) {
    case Arithmetic::p_f16:
      return {.p = DType::f16,
              .rotated_keys_in_storage = true,
              .rotated_queries_in_storage = true,
              .rope_angles_exact = true};
    case Arithmetic::acc_f16:
      return {.value_accumulation = DType::f16,
              .rotated_keys_in_storage = true,
              .rotated_queries_in_storage = true,
              .rope_angles_exact = true};
    case Arithmetic::f32:
      break;
  }
  return {};
}

std::unique_ptr<ModelEngine> make_cached_model(const ModelEngineConfig& config,
                                               Arithmetic arithmetic, Bug bug, DType activations) {
  return std::make_unique<CachedModelEngine>(config, arithmetic, bug, activations);
}

std::vector<EngineInfo> registry_entries() {
  const auto entry = [](std::string name, std::string description, Arithmetic arithmetic, Bug bug) {
    EngineInfo info;
    info.name = std::move(name);
    info.description = std::move(description);
    info.mutant = bug != Bug::none;
    info.make_model = [arithmetic, bug](const ModelEngineConfig& config) {
      return make_cached_model(config, arithmetic, bug);
    };
    return info;
  };
  return {
      entry("model-cached",
            "Whole-model engine (vocabulary ids in, logits out): the tiny transformer with a "
            "paged KV cache per layer, f32 (model scenarios only).",
            Arithmetic::f32, Bug::none),
      entry("model-cached-f16",
            "Whole-model engine computing as llama.cpp's CPU path without flash attention: K/V "
            "in the storage dtype (f16 or f32) holding rotated keys, rotated q rounded to it, P "
            "rounded to f16 before P.V (model scenarios only).",
            Arithmetic::p_f16, Bug::none),
      entry("model-cached-f16acc",
            "Whole-model engine computing as ggml's CPU flash attention: K/V in the storage dtype "
            "(f16 or f32) holding rotated keys, rotated q rounded to it, P.V summed in f16 "
            "(model scenarios only).",
            Arithmetic::acc_f16, Bug::none),
      entry("model-truncate-keeps-one",
            "Whole-model engine whose truncate keeps one token too many in every layer's cache, "
            "so the next token sees it and is placed one position late.",
            Arithmetic::f32, Bug::truncate_keeps_one),
      entry("model-fork-ignored",
            "Whole-model engine whose fork leaves the destination sequence as it was instead of "
            "giving it the source's tokens.",
            Arithmetic::f32, Bug::fork_from_self),
  };
}

}  // namespace kvfuzz::model_engines
