#include "llama_cpp_run.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "model/reference_forward.h"
#include "model/transformer.h"

namespace kvfuzz::test {

namespace {

// The program's chunks by op, as for_each_chunk places them (epoch and first position).
std::map<int, std::vector<PlacedChunk>> chunks_by_op(const Scenario& scenario) {
  std::map<int, std::vector<PlacedChunk>> by_op;
  for_each_chunk(scenario, [&](const PlacedChunk& c) { by_op[c.op].push_back(c); });
  return by_op;
}

}  // namespace

namespace {

double rms_of(const std::map<RowKey, TransformerRow>& reference) {
  double sum = 0;
  size_t n = 0;
  for (const auto& [key, row] : reference) {
    for (const double x : row.logits) sum += x * x;
    n += row.logits.size();
  }
  return n > 0 ? std::sqrt(sum / static_cast<double>(n)) : 1.0;
}

}  // namespace

double own_forward_error(const Scenario& scenario, const char* engine) {
  const TransformerWeights weights = make_weights(*scenario.model, scenario.layout);
  const std::map<RowKey, TransformerRow> reference = reference_transformer(scenario, weights);
  const EngineInfo* info = find_engine(engine);
  if (!info) return std::numeric_limits<double>::infinity();
  const std::vector<const EngineInfo*> layers(static_cast<size_t>(scenario.model->layers), info);
  const TransformerRun run = run_transformer(scenario, weights, layers);
  if (!run.error.empty()) return std::numeric_limits<double>::infinity();
  const double rms = rms_of(reference);
  double worst = 0;
  for (const TransformerRow& row : run.rows) {
    const auto found = reference.find(row.key);
    if (found == reference.end()) continue;
    for (size_t v = 0; v < row.logits.size(); ++v)
      worst = std::max(worst, std::fabs(row.logits[v] - found->second.logits[v]) / rms);
  }
  return worst;
}

ModelEngineMeasure measure_model_engine(const Scenario& scenario, const ModelEngineFactory& make) {
  ModelEngineMeasure m;
  const TransformerWeights weights = make_weights(*scenario.model, scenario.layout);
  const std::map<RowKey, TransformerRow> reference = reference_transformer(scenario, weights);
  m.rows = static_cast<int>(reference.size());
  const auto vocab = static_cast<size_t>(scenario.model->vocab);
  std::map<RowKey, std::vector<float>> got;
  try {
    ModelEngineConfig config{engine_config(scenario), *scenario.model};
    const std::unique_ptr<ModelEngine> engine = make(config);
    const auto placed = chunks_by_op(scenario);
    for (size_t i = 0; i < scenario.program.size(); ++i) {
      const Op& op = scenario.program[i];
      switch (op.kind) {
        case OpKind::reset:
          engine->reset(op.seq);
          continue;
        case OpKind::truncate:
          engine->truncate(op.seq, op.keep);
          continue;
        case OpKind::fork:
          engine->fork(op.src, op.seq);
          continue;
        case OpKind::append:
        case OpKind::step:
          break;
      }
      const auto found = placed.find(static_cast<int>(i));
      if (found == placed.end()) continue;
      const std::vector<PlacedChunk>& chunks = found->second;
      std::vector<ModelChunkIn> ins;
      for (const PlacedChunk& c : chunks) ins.push_back({c.seq, *c.tokens});
      std::vector<ModelChunkOut> outs(ins.size());
      engine->step(ins, outs);
      for (size_t k = 0; k < chunks.size(); ++k) {
        const PlacedChunk& c = chunks[k];
        for (size_t t = 0; t < c.tokens->size(); ++t) {
          const int64_t pos = c.start + static_cast<int64_t>(t);
          if (t >= outs[k].positions.size() || outs[k].positions[t] != pos) ++m.wrong_positions;
          if (outs[k].logits.size() < (t + 1) * vocab) continue;
          const auto row = outs[k].logits.begin() + static_cast<ptrdiff_t>(t * vocab);
          got[RowKey{c.seq, c.epoch, pos}] =
              std::vector<float>(row, row + static_cast<ptrdiff_t>(vocab));
        }
      }
    }
  } catch (const std::exception& e) {
    m.error = e.what();
  }
  const double rms = rms_of(reference);
  for (const auto& [key, row] : reference) {
    const auto found = got.find(key);
    if (found == got.end()) {
      ++m.missing;
      m.max_relative_error = std::numeric_limits<double>::infinity();
      continue;
    }
    for (size_t v = 0; v < vocab; ++v) {
      const double e = std::fabs(static_cast<double>(found->second[v]) - row.logits[v]) / rms;
      const double err = std::isfinite(e) ? e : std::numeric_limits<double>::infinity();
      if (err > m.max_relative_error || (std::isinf(err) && m.worst.empty())) {
        m.max_relative_error = err;
        m.worst = "seq " + std::to_string(key.seq) + " epoch " + std::to_string(key.epoch) +
                  " pos " + std::to_string(key.pos) + " logit " + std::to_string(v);
      }
    }
  }
  return m;
}

}  // namespace kvfuzz::test
