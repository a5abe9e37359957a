#include "kvfuzz/engine.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <numeric>
#include <string>

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
  config.sequences = scenario.sequences;
  config.poison = scenario.placement.poison;
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

void apply_history_op(Engine& engine, const Op& op) {
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

EngineCapabilities probe_capabilities(const EngineInfo& engine) {
  EngineConfig config;
  config.sequences = 4;
  config.page_order = {0, 1, 2, 3};
  try {
    const std::unique_ptr<Engine> probe = engine.make(config);
    if (!probe) throw EngineError("its factory returned no engine");
    return probe->capabilities();
  } catch (const std::exception& e) {
    throw EngineError("engine " + engine.name +
                      " cannot be made for the smallest layout: " + e.what());
  }
}

std::optional<std::string> unsupported_operation(const Scenario& scenario, EngineCapabilities can) {
  for (const Op& op : scenario.program) {
    if (op.kind == OpKind::truncate && !can.truncate) return "truncate";
    if (op.kind == OpKind::fork && !can.fork) return "fork";
  }
  return std::nullopt;
}

}  // namespace kvfuzz
