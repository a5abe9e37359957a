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
