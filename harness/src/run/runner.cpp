// The runner: the program, op by op, as a real caller would feed it. The engine gets the
// new tokens' q/k/v and nothing else; the keys of the rows it returns combine the runner's
// own bookkeeping (sequence, epoch) with the position the engine reports.
#include "run/runner.h"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <map>
#include <numeric>
#include <string>

#include "kvfuzz/op_chunks.h"

namespace kvfuzz {

std::vector<ExpectedSlot> expected_slots(const Scenario& scenario) {
  std::vector<ExpectedSlot> slots;
  for_each_chunk(scenario, [&](const PlacedChunk& c) {
    for (size_t t = 0; t < c.tokens->size(); ++t) {
      slots.push_back(ExpectedSlot{RowKey{c.seq, c.epoch, c.start + static_cast<int64_t>(t)},
                                   RowOrigin{c.op, c.chunk, static_cast<int>(t)}});
    }
  });
  return slots;
}

namespace {

std::string describe_origin(const RowOrigin& origin) {
  return "op " + std::to_string(origin.op) + ", chunk " + std::to_string(origin.chunk);
}

}  // namespace

EngineRun run_engine(const Scenario& scenario, const TokenTable& table, Engine& engine) {
  const Layout& layout = scenario.layout;
  const size_t q_size = static_cast<size_t>(layout.q_heads) * layout.head_dim;
  const size_t k_size = static_cast<size_t>(layout.kv_heads) * layout.head_dim;
  const size_t v_size = static_cast<size_t>(layout.kv_heads) * layout.value_dim;
  const size_t row_size = static_cast<size_t>(layout.q_heads) * layout.value_dim;

  EngineRun run;
  // The runner's own epoch counter per sequence; a sequence out of range (the engine will
  // refuse it) is keyed with epoch 0.
  std::vector<int> epochs(static_cast<size_t>(std::max(0, scenario.sequences)), 0);
  const auto epoch_of = [&](int seq) {
    return seq >= 0 && static_cast<size_t>(seq) < epochs.size() ? epochs[static_cast<size_t>(seq)]
                                                                : 0;
  };

  // Reused across ops: gathered inputs, chunk descriptors and outputs.
  std::vector<float> q, k, v;
  std::vector<ChunkIn> ins;
  std::vector<ChunkOut> outs;
  OpChunks op_chunks;

  for (size_t o = 0; o < scenario.program.size(); ++o) {
    const Op& op = scenario.program[o];
    const int op_index = static_cast<int>(o);
    if (op.kind == OpKind::reset || op.kind == OpKind::truncate || op.kind == OpKind::fork) {
      const std::string what = describe_history_op(op);
      try {
        apply_history_op(engine, op);
      } catch (const std::exception& e) {
        run.error = "engine threw on " + what + ": " + e.what();
        run.error_at = RowOrigin{op_index, 0, 0};
        return run;
      } catch (...) {
        run.error = "engine threw a non-standard exception on " + what;
        run.error_at = RowOrigin{op_index, 0, 0};
        return run;
      }
      // Each of these starts a new epoch of the sequence it changes (see for_each_chunk).
      if (op.seq >= 0 && static_cast<size_t>(op.seq) < epochs.size()) {
        ++epochs[static_cast<size_t>(op.seq)];
      }
      continue;
    }

    const std::vector<Chunk>& chunks = op_chunks.of(op);

    size_t total = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Chunk& chunk = chunks[c];
      for (size_t t = 0; t < chunk.tokens.size(); ++t) {
        if (chunk.tokens[t] < 0 || chunk.tokens[t] >= table.count()) {
          // validate() rejects such scenarios; never read outside the table regardless.
          run.error = "token id " + std::to_string(chunk.tokens[t]) +
                      " is not in the token table (" + std::to_string(table.count()) + " tokens)";
          run.error_at = RowOrigin{op_index, static_cast<int>(c), static_cast<int>(t)};
          return run;
        }
      }
      total += chunk.tokens.size();
    }
    q.resize(total * q_size);
    k.resize(total * k_size);
    v.resize(total * v_size);
    ins.clear();
    size_t at = 0;
    for (const Chunk& chunk : chunks) {
      const size_t count = chunk.tokens.size();
      for (size_t t = 0; t < count; ++t) {
        const int id = chunk.tokens[t];
        std::ranges::copy(table.q(id), q.begin() + static_cast<std::ptrdiff_t>((at + t) * q_size));
        std::ranges::copy(table.k(id), k.begin() + static_cast<std::ptrdiff_t>((at + t) * k_size));
        std::ranges::copy(table.v(id), v.begin() + static_cast<std::ptrdiff_t>((at + t) * v_size));
      }
      ChunkIn in;
      in.seq = chunk.seq;
      in.tokens = static_cast<int>(count);
      in.q = std::span<const float>(q).subspan(at * q_size, count * q_size);
      in.k = std::span<const float>(k).subspan(at * k_size, count * k_size);
      in.v = std::span<const float>(v).subspan(at * v_size, count * v_size);
      ins.push_back(in);
      at += count;
    }
    if (outs.size() < ins.size()) outs.resize(ins.size());
    for (size_t c = 0; c < ins.size(); ++c) {
      outs[c].out.clear();
      outs[c].positions.clear();
    }

    try {
      engine.step(std::span<const ChunkIn>(ins), std::span<ChunkOut>(outs.data(), ins.size()));
    } catch (const std::exception& e) {
      run.error = std::string("engine threw: ") + e.what();
      run.error_at = RowOrigin{op_index, 0, 0};
      return run;
    } catch (...) {
      run.error = "engine threw a non-standard exception";
      run.error_at = RowOrigin{op_index, 0, 0};
      return run;
    }

    for (size_t c = 0; c < ins.size(); ++c) {
      const ChunkIn& in = ins[c];
      const ChunkOut& out = outs[c];
      const auto tokens = static_cast<size_t>(in.tokens);
      const RowOrigin origin{op_index, static_cast<int>(c), 0};
      if (out.out.size() != tokens * row_size || out.positions.size() != tokens) {
        run.error = "engine returned a wrongly shaped chunk at " + describe_origin(origin) +
                    " (seq " + std::to_string(in.seq) + ", " + std::to_string(tokens) +
                    " tokens): " + std::to_string(out.out.size()) + " values and " +
                    std::to_string(out.positions.size()) + " positions; expected " +
                    std::to_string(tokens * row_size) + " values (" + std::to_string(tokens) +
                    " tokens x " + std::to_string(layout.q_heads) + " q heads x " +
                    std::to_string(layout.value_dim) + " value dims) and " +
                    std::to_string(tokens) + " positions";
        run.error_at = origin;
        return run;
      }
      const int epoch = epoch_of(in.seq);
      for (size_t t = 0; t < tokens; ++t) {
        EngineRow row;
        row.key = RowKey{in.seq, epoch, out.positions[t]};
        row.origin = RowOrigin{op_index, static_cast<int>(c), static_cast<int>(t)};
        const auto first = out.out.begin() + static_cast<std::ptrdiff_t>(t * row_size);
        row.values.assign(first, first + static_cast<std::ptrdiff_t>(row_size));
        run.rows.push_back(std::move(row));
      }
    }
  }
  return run;
}

}  // namespace kvfuzz
