// The cached forward: the program op by op through one engine per layer, as a server runs
// a decoder. Float arithmetic throughout; q, k and v are rounded to the layout's dtype
// before they reach the engine (every engine input is representable in its storage), and
// the engine applies RoPE at the positions it assigns itself: the model hands it unrotated
// q and k. Rows are keyed by the program's own bookkeeping; the position each layer's
// engine reported is recorded beside it for the judge.
#include <algorithm>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include "kvfuzz/dtype.h"
#include "model/model_math.h"
#include "model/transformer.h"
#include "run/op_chunks.h"

namespace kvfuzz {

namespace {

std::vector<double> widen(const float* x, size_t n) {
  return std::vector<double>(x, x + n);
}

}  // namespace

TransformerRun run_transformer(const Scenario& scenario, const TransformerWeights& weights,
                               std::span<const EngineInfo* const> layer_engines) {
  TransformerRun run;
  const auto fail = [&](std::string message, RowOrigin at, int layer) {
    run.error = std::move(message);
    run.error_at = at;
    run.error_layer = layer;
    return run;
  };
  if (!scenario.model) return fail("the scenario has no model", {}, -1);
  const ModelConfig& model = *scenario.model;
  const Layout& layout = scenario.layout;
  const model::Dims d = model::dims_of(model, layout);
  if (weights.layers.size() != d.layers || layer_engines.size() != d.layers) {
    return fail("the model has " + std::to_string(d.layers) + " layers, the weights " +
                    std::to_string(weights.layers.size()) + " and the engines " +
                    std::to_string(layer_engines.size()),
                {}, -1);
  }

  // The program's keys: (op, chunk) -> (epoch, first position).
  std::map<std::pair<int, int>, std::pair<int, int64_t>> placed;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    placed[{c.op, c.chunk}] = {c.epoch, c.start};
  });

  const EngineConfig config = engine_config(scenario);
  std::vector<std::unique_ptr<Engine>> engines(d.layers);
  for (size_t l = 0; l < d.layers; ++l) {
    const int layer = static_cast<int>(l);
    try {
      if (layer_engines[l] == nullptr) throw EngineError("no engine for this layer");
      engines[l] = layer_engines[l]->make(config);
      if (!engines[l]) throw EngineError("the factory returned no engine");
    } catch (const std::exception& e) {
      return fail(std::string("engine could not be made: ") + e.what(), {}, layer);
    }
  }

  const size_t W = d.width, F = d.ffn;
  const size_t qs = d.q_size(), ks = d.k_size(), vs = d.v_size(), as = d.attention_size();
  std::vector<float> h, n, q, k, v, attn, o, gate, up, logits(d.vocab);
  std::vector<ChunkIn> ins;
  std::vector<ChunkOut> outs;
  OpChunks op_chunks;

  for (size_t op_at = 0; op_at < scenario.program.size(); ++op_at) {
    const Op& op = scenario.program[op_at];
    const int op_index = static_cast<int>(op_at);
    if (op.kind == OpKind::reset || op.kind == OpKind::truncate || op.kind == OpKind::fork) {
      for (size_t l = 0; l < d.layers; ++l) {
        Engine& engine = *engines[l];
        try {
          apply_history_op(engine, op);
        } catch (const std::exception& e) {
          return fail("engine threw on " + describe_history_op(op) + ": " + e.what(),
                      {op_index, 0, 0}, static_cast<int>(l));
        }
      }
      continue;
    }

    const std::vector<Chunk>& chunks = op_chunks.of(op);

    // One row per token of the op, with its key; the embedding starts its hidden state.
    std::vector<TransformerRow> rows;
    std::vector<size_t> chunk_first;  // index of each chunk's first row
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Chunk& chunk = chunks[c];
      chunk_first.push_back(rows.size());
      const auto found = placed.find({op_index, static_cast<int>(c)});
      const auto [epoch, start] = found != placed.end() ? found->second : std::pair<int, int64_t>{};
      for (size_t t = 0; t < chunk.tokens.size(); ++t) {
        const RowOrigin origin{op_index, static_cast<int>(c), static_cast<int>(t)};
        if (chunk.tokens[t] < 0 || static_cast<size_t>(chunk.tokens[t]) >= d.vocab) {
          return fail("token id " + std::to_string(chunk.tokens[t]) +
                          " is not in the vocabulary (" + std::to_string(d.vocab) + " ids)",
                      origin, -1);
        }
        TransformerRow row;
        row.key = RowKey{chunk.seq, epoch, start + static_cast<int64_t>(t)};
        row.origin = origin;
        rows.push_back(std::move(row));
      }
    }
    chunk_first.push_back(rows.size());
    const size_t total = rows.size();
    h.resize(total * W);
    for (size_t r = 0; r < total; ++r) {
      const size_t id = static_cast<size_t>(chunks[static_cast<size_t>(rows[r].origin.chunk)]
                                                .tokens[static_cast<size_t>(rows[r].origin.token)]);
      std::copy_n(weights.embedding.begin() + static_cast<std::ptrdiff_t>(id * W), W,
                  h.begin() + static_cast<std::ptrdiff_t>(r * W));
    }
    n.resize(total * W);
    q.resize(total * qs);
    k.resize(total * ks);
    v.resize(total * vs);
    attn.resize(total * as);
    o.resize(W);
    gate.resize(F);
    up.resize(F);

    for (size_t l = 0; l < d.layers; ++l) {
      const TransformerWeights::Layer& w = weights.layers[l];
      const int layer = static_cast<int>(l);
      for (size_t r = 0; r < total; ++r) {
        float* x = n.data() + r * W;
        model::rms_norm(h.data() + r * W, w.attention_norm.data(), W, x);
        model::mat_vec(x, w.wq, W, qs, q.data() + r * qs);
        model::mat_vec(x, w.wk, W, ks, k.data() + r * ks);
        model::mat_vec(x, w.wv, W, vs, v.data() + r * vs);
      }
      for (float& x : q) x = round_to_dtype(x, layout.dtype);
      for (float& x : k) x = round_to_dtype(x, layout.dtype);
      for (float& x : v) x = round_to_dtype(x, layout.dtype);

      ins.clear();
      for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t at = chunk_first[c], count = chunk_first[c + 1] - at;
        ChunkIn in;
        in.seq = chunks[c].seq;
        in.tokens = static_cast<int>(count);
        in.q = std::span<const float>(q).subspan(at * qs, count * qs);
        in.k = std::span<const float>(k).subspan(at * ks, count * ks);
        in.v = std::span<const float>(v).subspan(at * vs, count * vs);
        ins.push_back(in);
      }
      outs.assign(ins.size(), ChunkOut{});
      try {
        engines[l]->step(std::span<const ChunkIn>(ins), std::span<ChunkOut>(outs));
      } catch (const std::exception& e) {
        return fail(std::string("engine threw: ") + e.what(), {op_index, 0, 0}, layer);
      }
      for (size_t c = 0; c < ins.size(); ++c) {
        const size_t at = chunk_first[c], count = chunk_first[c + 1] - at;
        if (outs[c].out.size() != count * as || outs[c].positions.size() != count) {
          return fail("engine returned a wrongly shaped chunk at op " + std::to_string(op_index) +
                          ", chunk " + std::to_string(c) + " (seq " + std::to_string(ins[c].seq) +
                          ", " + std::to_string(count) +
                          " tokens): " + std::to_string(outs[c].out.size()) + " values and " +
                          std::to_string(outs[c].positions.size()) + " positions; expected " +
                          std::to_string(count * as) + " values and " + std::to_string(count) +
                          " positions",
                      {op_index, static_cast<int>(c), 0}, layer);
        }
        std::copy(outs[c].out.begin(), outs[c].out.end(),
                  attn.begin() + static_cast<std::ptrdiff_t>(at * as));
        for (size_t t = 0; t < count; ++t) {
          rows[at + t].reported_positions.push_back(outs[c].positions[t]);
        }
      }

      for (size_t r = 0; r < total; ++r) {
        float* x = h.data() + r * W;
        const float* a = attn.data() + r * as;
        rows[r].attention.push_back(widen(a, as));
        model::mat_vec(a, w.wo, as, W, o.data());
        for (size_t i = 0; i < W; ++i) x[i] += o[i];
        float* y = n.data() + r * W;
        model::rms_norm(x, w.mlp_norm.data(), W, y);
        model::mat_vec(y, w.w_gate, W, F, gate.data());
        model::mat_vec(y, w.w_up, W, F, up.data());
        for (size_t i = 0; i < F; ++i) gate[i] = model::silu(gate[i]) * up[i];
        model::mat_vec(gate.data(), w.w_down, F, W, o.data());
        for (size_t i = 0; i < W; ++i) x[i] += o[i];
        rows[r].hidden.push_back(widen(x, W));
      }
    }

    for (size_t r = 0; r < total; ++r) {
      float* y = n.data() + r * W;
      model::rms_norm(h.data() + r * W, weights.final_norm.data(), W, y);
      model::mat_vec(y, weights.lm_head, W, d.vocab, logits.data());
      rows[r].logits = widen(logits.data(), d.vocab);
      run.rows.push_back(std::move(rows[r]));
    }
  }
  return run;
}

}  // namespace kvfuzz
