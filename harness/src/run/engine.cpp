#include "kvfuzz/engine.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <numeric>
#include <string>

#include "kvfuzz/kv_format.h"
#include "kvfuzz/model_engine.h"

namespace kvfuzz {

// The defaults of the optional operations: an engine that does not announce them refuses.
void Engine::truncate(int seq, int64_t /*keep*/) {
  throw EngineError("this engine does not support truncate (seq " + std::to_string(seq) + ")");
}

void Engine::fork(int src, int dst) {
  throw EngineError("this engine does not support fork (" + std::to_string(src) + " -> " +
                    std::to_string(dst) + ")");
}

EngineConfig engine_config(const Scenario& scenario) {
  EngineConfig config;
  config.layout = scenario.layout;
  config.layout.sinks = scenario.layout.stored_sinks();
  config.sequences = scenario.sequences;
  config.poison = scenario.placement.poison;
  config.threads = scenario.placement.threads;
  const Placement& placement = scenario.placement;
  if (placement.order == PageOrder::explicit_list) {
    config.page_order = placement.pages;
    return config;
  }
  const int pages =
      std::max(0, placement.pool_pages ? *placement.pool_pages : required_pool_pages(scenario));
  config.page_order.resize(static_cast<size_t>(pages));
  std::iota(config.page_order.begin(), config.page_order.end(), 0);
  if (placement.order == PageOrder::reversed) {
    std::reverse(config.page_order.begin(), config.page_order.end());
  }
  return config;
}

namespace {

// One rule for both kinds of engine: an unannounced optional operation is refused.
template <class E>
void apply_history(E& engine, const Op& op) {
  const EngineCapabilities can = engine.capabilities();
  if (op.kind == OpKind::reset) {
    engine.reset(op.seq);
  } else if (op.kind == OpKind::truncate && can.truncate) {
    engine.truncate(op.seq, op.keep);
  } else if (op.kind == OpKind::fork && can.fork) {
    engine.fork(op.src, op.seq);
  } else {
    throw EngineError("the engine does not announce this operation in capabilities()");
  }
}

}  // namespace

void apply_history_op(Engine& engine, const Op& op) {
  apply_history(engine, op);
}

void apply_history_op(ModelEngine& engine, const Op& op) {
  apply_history(engine, op);
}

std::string describe_history_op(const Op& op) {
  switch (op.kind) {
    case OpKind::reset:
      return "reset of seq " + std::to_string(op.seq);
    case OpKind::truncate:
      return "truncate of seq " + std::to_string(op.seq) + " to " + std::to_string(op.keep) +
             " tokens";
    case OpKind::fork:
      return "fork of seq " + std::to_string(op.src) + " into seq " + std::to_string(op.seq);
    case OpKind::append:
    case OpKind::step:
      break;
  }
  return "step";
}

// The smallest layout (one head of one dimension, f32, four sequences and pages): an
// engine answers it with its declarations even when its supports exclude it, because
// nothing is ever run on the probe.
EngineDeclarations probe_declarations(const EngineInfo& engine) {
  EngineConfig config;
  config.sequences = 4;
  config.page_order = {0, 1, 2, 3};
  try {
    if (engine.make_model && !engine.make) {
      const std::unique_ptr<ModelEngine> probe = engine.make_model({config, ModelConfig{}});
      if (!probe) throw EngineError("its factory returned no engine");
      return {probe->capabilities(), probe->numerics(), probe->supports(), {}, true};
    }
    if (!engine.make) throw EngineError("it has no factory");
    const std::unique_ptr<Engine> probe = engine.make(config);
    if (!probe) throw EngineError("its factory returned no engine");
    return {probe->capabilities(), probe->numerics(), probe->supports(), probe->bitwise_claims()};
  } catch (const std::exception& e) {
    throw EngineError("engine " + engine.name +
                      " cannot be made for the smallest layout: " + e.what());
  }
}

EngineCapabilities probe_capabilities(const EngineInfo& engine) {
  return probe_declarations(engine).capabilities;
}

bool computes_in_f32(const EngineNumerics& numerics) {
  return numerics.output == DType::f32 && !numerics.p &&
         numerics.score_accumulation == DType::f32 && numerics.value_accumulation == DType::f32 &&
         !numerics.split_combine_lse && numerics.split_partials == DType::f32 &&
         !numerics.p_normalised && numerics.rope_tables == DType::f32 && numerics.exp_ulps == 1 &&
         !numerics.query_blocks && numerics.activations == DType::f32;
}

std::optional<std::string> unjudgeable(const Scenario& scenario,
                                       const EngineDeclarations& declared) {
  if (const auto missing = unsupported_operation(scenario, declared.capabilities)) {
    return "uses " + *missing + ", which it does not announce";
  }
  if (const auto outside = unsupported_layout(scenario, declared.supports)) {
    return "lies outside its supports: " + *outside;
  }
  if (!scenario.model && declared.whole_model) {
    return "is an attention scenario, and the engine runs whole models only (vocabulary ids "
           "in, logits out)";
  }
  return std::nullopt;
}

std::optional<std::string> unsupported_layout(const Scenario& scenario,
                                              const EngineSupports& supports) {
  const Layout& l = scenario.layout;
  const auto& dtypes = supports.dtypes;
  if (std::find(dtypes.begin(), dtypes.end(), l.dtype) == dtypes.end()) {
    std::string names;
    for (DType d : dtypes) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
    return "storage dtype " + std::string(dtype_name(l.dtype)) + " (the engine supports " +
           (names.empty() ? "none" : names) + ")";
  }
  const int multiple = std::max(1, supports.head_dim_multiple);
  if (l.head_dim % multiple != 0 || l.value_dim % multiple != 0) {
    return "head_dim " + std::to_string(l.head_dim) + " / value_dim " +
           std::to_string(l.value_dim) + " (the engine supports multiples of " +
           std::to_string(multiple) + ")";
  }
  if (supports.max_head_dim > 0 && std::max(l.head_dim, l.value_dim) > supports.max_head_dim) {
    return "head_dim " + std::to_string(l.head_dim) + " / value_dim " +
           std::to_string(l.value_dim) + " (the engine supports at most " +
           std::to_string(supports.max_head_dim) + ")";
  }
  if (supports.value_dim_is_head_dim && l.value_dim != l.head_dim) {
    return "value_dim " + std::to_string(l.value_dim) + " with head_dim " +
           std::to_string(l.head_dim) + " (the engine supports only equal dims)";
  }
  if (supports.rope_required && !l.rope_theta) {
    return "a layout without RoPE (the engine supports only RoPE layouts)";
  }
  if (!supports.windows && l.window) {
    return "a sliding window of " + std::to_string(*l.window) + " (the engine supports no windows)";
  }
  const auto feature = [](std::string_view name, bool on, bool supported) {
    return on && !supported
               ? std::optional<std::string>(std::string(name) + " (the engine does not declare it)")
               : std::nullopt;
  };
  for (const auto& refusal :
       {feature("a soft cap", l.softcap.has_value(), supports.softcap),
        feature("attention sinks", !l.sinks.empty(), supports.sinks),
        feature("ALiBi", !l.alibi.empty(), supports.alibi),
        feature("chunked local attention", l.chunked_local.has_value(), supports.chunked_local),
        feature("an fp8 KV cache", is_fp8(l.k_format.quant) || is_fp8(l.v_format.quant),
                supports.kv_fp8),
        feature("a ggml block KV cache",
                is_ggml_block(l.k_format.quant) || is_ggml_block(l.v_format.quant),
                supports.kv_ggml_blocks),
        feature("an affine-group KV cache",
                is_affine(l.k_format.quant) || is_affine(l.v_format.quant), supports.kv_affine),
        feature("keys quantized by channel", is_channel(l.k_format.quant), supports.kv_channel),
        feature("a value read from its key (MLA)", l.value_from_key, supports.value_from_key),
        feature("RoPE in interleaved pairs", l.rope_style == RopeStyle::interleaved,
                supports.rope_interleaved),
        feature("RoPE on part of the head (rope_dims)", l.rope_dims.has_value(),
                supports.rope_dims)}) {
    if (refusal) return refusal;
  }
  // One format: the same quantization and group; K's and V's scales are their own.
  if (supports.kv_one_format &&
      (l.k_format.quant != l.v_format.quant || l.k_format.group != l.v_format.group)) {
    return "K in " + std::string(kv_quant_name(l.k_format.quant)) + " and V in " +
           std::string(kv_quant_name(l.v_format.quant)) +
           " (the engine stores K and V in one format)";
  }
  if (supports.kv_tensor_scales && (l.k_format.scale.size() > 1 || l.v_format.scale.size() > 1)) {
    return "an fp8 scale per kv head (the engine takes one scale per tensor)";
  }
  if (supports.max_q_heads > 0 && l.q_heads > supports.max_q_heads) {
    return std::to_string(l.q_heads) + " q heads (the engine supports at most " +
           std::to_string(supports.max_q_heads) + ")";
  }
  if (supports.max_context > 0 && max_epoch_length(scenario) > supports.max_context) {
    return "a context of " + std::to_string(max_epoch_length(scenario)) +
           " tokens (the engine supports at most " + std::to_string(supports.max_context) + ")";
  }
  return std::nullopt;
}

std::optional<std::string> unsupported_operation(const Scenario& scenario, EngineCapabilities can) {
  for (const Op& op : scenario.program) {
    if (op.kind == OpKind::truncate && !can.truncate) return "truncate";
    if (op.kind == OpKind::fork && !can.fork) return "fork";
  }
  return std::nullopt;
}

}  // namespace kvfuzz
