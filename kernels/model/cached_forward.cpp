// The cached forward over a whole program: op by op through one attention engine per layer
// (model/cached_transformer.h does each step), as a server runs a decoder. Rows are keyed
// by the program's own bookkeeping; the position each layer's engine reported is recorded
// beside it for the judge.
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "kvfuzz/op_chunks.h"
#include "model/cached_transformer.h"
#include "model/transformer.h"

namespace kvfuzz {

TransformerRun run_transformer(const Scenario& scenario, const TransformerWeights& weights,
                               std::span<const EngineInfo* const> layer_engines) {
  TransformerRun run;
  const auto fail = [&](std::string message, RowOrigin at, int layer,
                        EngineErrorKind kind = EngineErrorKind::error) {
    run.error = std::move(message);
    run.error_at = at;
    run.error_layer = layer;
    run.error_kind = kind;
    return run;
  };
  if (!scenario.model) return fail("the scenario has no model", {}, -1);

  // The program's keys: (op, chunk) -> (epoch, first position).
  std::map<std::pair<int, int>, std::pair<int, int64_t>> placed;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    placed[{c.op, c.chunk}] = {c.epoch, c.start};
  });

  std::optional<model::CachedTransformer> forward;
  try {
    forward.emplace(weights, *scenario.model, engine_config(scenario), layer_engines);
  } catch (const model::LayerFailure& e) {
    return fail(e.what(), {}, e.layer);
  }
  if (!layer_engines.empty()) run.numerics = forward->layer(0).numerics();

  OpChunks op_chunks;
  std::vector<ModelChunkIn> ins;
  for (size_t op_at = 0; op_at < scenario.program.size(); ++op_at) {
    const Op& op = scenario.program[op_at];
    const int op_index = static_cast<int>(op_at);
    if (op.kind == OpKind::reset || op.kind == OpKind::truncate || op.kind == OpKind::fork) {
      try {
        forward->history(op);
      } catch (const model::LayerFailure& e) {
        return fail(e.what(), {op_index, 0, 0}, e.layer);
      }
      continue;
    }
    const std::vector<Chunk>& chunks = op_chunks.of(op);
    ins.clear();
    for (const Chunk& chunk : chunks) ins.push_back(ModelChunkIn{chunk.seq, chunk.tokens});
    std::vector<model::StepRow> stepped;
    try {
      stepped = forward->step(ins);
    } catch (const model::LayerFailure& e) {
      return fail(e.what(), {op_index, e.chunk < 0 ? 0 : e.chunk, 0}, e.layer, e.kind);
    }
    size_t r = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const auto found = placed.find({op_index, static_cast<int>(c)});
      const auto [epoch, start] = found != placed.end() ? found->second : std::pair<int, int64_t>{};
      for (size_t t = 0; t < chunks[c].tokens.size(); ++t, ++r) {
        TransformerRow row;
        row.key = RowKey{chunks[c].seq, epoch, start + static_cast<int64_t>(t)};
        row.origin = RowOrigin{op_index, static_cast<int>(c), static_cast<int>(t)};
        row.reported_positions = std::move(stepped[r].positions);
        row.attention = std::move(stepped[r].attention);
        row.hidden = std::move(stepped[r].hidden);
        row.logits = std::move(stepped[r].logits);
        run.rows.push_back(std::move(row));
      }
    }
  }
  return run;
}

}  // namespace kvfuzz
