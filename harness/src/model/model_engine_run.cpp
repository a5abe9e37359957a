#include "model/model_engine_run.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvfuzz/model_engine.h"
#include "kvfuzz/op_chunks.h"

namespace kvfuzz::model {

WholeModelRun run_model_engine(const Scenario& scenario, const EngineInfo& engine) {
  WholeModelRun result;
  TransformerRun& run = result.run;
  const auto fail = [&](std::string message, RowOrigin at) {
    run.error = std::move(message);
    run.error_at = at;
    return result;
  };
  if (!scenario.model) return fail("the scenario has no model", {});
  const size_t vocab = static_cast<size_t>(std::max(0, scenario.model->vocab));

  std::unique_ptr<ModelEngine> instance;
  try {
    if (!engine.make_model) throw EngineError("it runs no whole models");
    instance = engine.make_model(ModelEngineConfig{engine_config(scenario), *scenario.model});
    if (!instance) throw EngineError("its factory returned no engine");
    result.numerics = instance->numerics();
  } catch (const std::exception& e) {
    return fail("engine '" + engine.name + "' could not be made: " + e.what(), {});
  }

  // The program's keys: (op, chunk) -> (epoch, first position).
  std::map<std::pair<int, int>, std::pair<int, int64_t>> placed;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    placed[{c.op, c.chunk}] = {c.epoch, c.start};
  });

  OpChunks op_chunks;
  std::vector<ModelChunkIn> ins;
  std::vector<ModelChunkOut> outs;
  for (size_t op_at = 0; op_at < scenario.program.size(); ++op_at) {
    const Op& op = scenario.program[op_at];
    const int op_index = static_cast<int>(op_at);
    if (op.kind == OpKind::reset || op.kind == OpKind::truncate || op.kind == OpKind::fork) {
      try {
        apply_history_op(*instance, op);
      } catch (const std::exception& e) {
        return fail("engine threw on " + describe_history_op(op) + ": " + e.what(),
                    {op_index, 0, 0});
      }
      continue;
    }
    const std::vector<Chunk>& chunks = op_chunks.of(op);
    ins.clear();
    for (const Chunk& chunk : chunks) ins.push_back(ModelChunkIn{chunk.seq, chunk.tokens});
    outs.assign(ins.size(), ModelChunkOut{});
    try {
      instance->step(std::span<const ModelChunkIn>(ins), std::span<ModelChunkOut>(outs));
    } catch (const std::exception& e) {
      return fail(std::string("engine threw: ") + e.what(), {op_index, 0, 0});
    }
    for (size_t c = 0; c < chunks.size(); ++c) {
      const size_t count = chunks[c].tokens.size();
      const ModelChunkOut& out = outs[c];
      if (out.logits.size() != count * vocab || out.positions.size() != count) {
        return fail("engine returned a wrongly shaped chunk at op " + std::to_string(op_index) +
                        ", chunk " + std::to_string(c) + " (seq " + std::to_string(chunks[c].seq) +
                        ", " + std::to_string(count) +
                        " tokens): " + std::to_string(out.logits.size()) + " logits and " +
                        std::to_string(out.positions.size()) + " positions; expected " +
                        std::to_string(count * vocab) + " logits (" + std::to_string(vocab) +
                        " per token) and " + std::to_string(count) + " positions",
                    {op_index, static_cast<int>(c), 0});
      }
      const auto found = placed.find({op_index, static_cast<int>(c)});
      const auto [epoch, start] = found != placed.end() ? found->second : std::pair<int, int64_t>{};
      for (size_t t = 0; t < count; ++t) {
        TransformerRow row;
        row.key = RowKey{chunks[c].seq, epoch, start + static_cast<int64_t>(t)};
        row.origin = RowOrigin{op_index, static_cast<int>(c), static_cast<int>(t)};
        row.reported_positions = {out.positions[t]};
        row.logits.assign(out.logits.begin() + static_cast<std::ptrdiff_t>(t * vocab),
                          out.logits.begin() + static_cast<std::ptrdiff_t>((t + 1) * vocab));
        run.rows.push_back(std::move(row));
      }
    }
  }
  return result;
}

}  // namespace kvfuzz::model
