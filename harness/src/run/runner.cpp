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

// One engine run, op by op: the runner's bookkeeping and the buffers every op reuses.
class ProgramRun {
 public:
  ProgramRun(const Scenario& scenario, const TokenTable& table, Engine& engine)
      : scenario_(scenario),
        table_(table),
        engine_(engine),
        q_size_(static_cast<size_t>(scenario.layout.q_heads) * scenario.layout.head_dim),
        k_size_(static_cast<size_t>(scenario.layout.kv_heads) * scenario.layout.head_dim),
        v_size_(static_cast<size_t>(scenario.layout.kv_heads) * scenario.layout.value_dim),
        row_size_(static_cast<size_t>(scenario.layout.q_heads) * scenario.layout.value_dim),
        epochs_(static_cast<size_t>(std::max(0, scenario.sequences)), 0) {}

  EngineRun run() && {
    for (size_t o = 0; o < scenario_.program.size(); ++o) {
      const Op& op = scenario_.program[o];
      const int op_index = static_cast<int>(o);
      const bool ok =
          op.kind == OpKind::reset || op.kind == OpKind::truncate || op.kind == OpKind::fork
              ? history(op, op_index)
              : step(op_chunks_.of(op), op_index);
      if (!ok) break;
    }
    return std::move(run_);
  }

 private:
  // A reset, truncate or fork; each starts a new epoch of the sequence it changes (see
  // for_each_chunk). False when the engine threw.
  bool history(const Op& op, int op_index) {
    const std::string what = describe_history_op(op);
    try {
      apply_history_op(engine_, op);
    } catch (const EngineError& e) {
      return fail("engine threw on " + what + ": " + e.what(), RowOrigin{op_index, 0, 0}, e.kind);
    } catch (const std::exception& e) {
      return fail("engine threw on " + what + ": " + e.what(), RowOrigin{op_index, 0, 0});
    } catch (...) {
      return fail("engine threw a non-standard exception on " + what, RowOrigin{op_index, 0, 0});
    }
    if (op.seq >= 0 && static_cast<size_t>(op.seq) < epochs_.size()) {
      ++epochs_[static_cast<size_t>(op.seq)];
    }
    return true;
  }

  // An op that feeds tokens: its chunks gathered, stepped, and their rows collected.
  bool step(const std::vector<Chunk>& chunks, int op_index) {
    return gather(chunks, op_index) && call_engine(op_index) && collect(op_index);
  }

  // The chunks' q/k/v from the token table, and a ChunkIn per chunk over them; false on a
  // token id outside the table (validate() rejects such scenarios; never read outside the
  // table regardless).
  bool gather(const std::vector<Chunk>& chunks, int op_index) {
    size_t total = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Chunk& chunk = chunks[c];
      for (size_t t = 0; t < chunk.tokens.size(); ++t) {
        if (chunk.tokens[t] < 0 || chunk.tokens[t] >= table_.count()) {
          return fail("token id " + std::to_string(chunk.tokens[t]) +
                          " is not in the token table (" + std::to_string(table_.count()) +
                          " tokens)",
                      RowOrigin{op_index, static_cast<int>(c), static_cast<int>(t)});
        }
      }
      total += chunk.tokens.size();
    }
    q_.resize(total * q_size_);
    k_.resize(total * k_size_);
    v_.resize(total * v_size_);
    ins_.clear();
    size_t at = 0;
    for (const Chunk& chunk : chunks) {
      const size_t count = chunk.tokens.size();
      for (size_t t = 0; t < count; ++t) {
        const int id = chunk.tokens[t];
        std::ranges::copy(table_.q(id),
                          q_.begin() + static_cast<std::ptrdiff_t>((at + t) * q_size_));
        std::ranges::copy(table_.k(id),
                          k_.begin() + static_cast<std::ptrdiff_t>((at + t) * k_size_));
        std::ranges::copy(table_.v(id),
                          v_.begin() + static_cast<std::ptrdiff_t>((at + t) * v_size_));
      }
      ChunkIn in;
      in.seq = chunk.seq;
      in.tokens = static_cast<int>(count);
      in.q = std::span<const float>(q_).subspan(at * q_size_, count * q_size_);
      in.k = std::span<const float>(k_).subspan(at * k_size_, count * k_size_);
      in.v = std::span<const float>(v_).subspan(at * v_size_, count * v_size_);
      ins_.push_back(in);
      at += count;
    }
    return true;
  }

  // The engine's step on the gathered chunks, into cleared outputs; false when it threw.
  bool call_engine(int op_index) {
    if (outs_.size() < ins_.size()) outs_.resize(ins_.size());
    for (size_t c = 0; c < ins_.size(); ++c) {
      outs_[c].out.clear();
      outs_[c].positions.clear();
    }
    try {
      engine_.step(std::span<const ChunkIn>(ins_), std::span<ChunkOut>(outs_.data(), ins_.size()));
    } catch (const EngineError& e) {
      return fail(std::string("engine threw: ") + e.what(), RowOrigin{op_index, 0, 0}, e.kind);
    } catch (const std::exception& e) {
      return fail(std::string("engine threw: ") + e.what(), RowOrigin{op_index, 0, 0});
    } catch (...) {
      return fail("engine threw a non-standard exception", RowOrigin{op_index, 0, 0});
    }
    return true;
  }

  // Every chunk's rows, keyed by the runner's sequence and epoch and the position the engine
  // reported; false on a wrongly shaped chunk.
  bool collect(int op_index) {
    const Layout& layout = scenario_.layout;
    for (size_t c = 0; c < ins_.size(); ++c) {
      const ChunkIn& in = ins_[c];
      const ChunkOut& out = outs_[c];
      const auto tokens = static_cast<size_t>(in.tokens);
      const RowOrigin origin{op_index, static_cast<int>(c), 0};
      if (out.out.size() != tokens * row_size_ || out.positions.size() != tokens) {
        return fail("engine returned a wrongly shaped chunk at " + describe_origin(origin) +
                        " (seq " + std::to_string(in.seq) + ", " + std::to_string(tokens) +
                        " tokens): " + std::to_string(out.out.size()) + " values and " +
                        std::to_string(out.positions.size()) + " positions; expected " +
                        std::to_string(tokens * row_size_) + " values (" + std::to_string(tokens) +
                        " tokens x " + std::to_string(layout.q_heads) + " q heads x " +
                        std::to_string(layout.value_dim) + " value dims) and " +
                        std::to_string(tokens) + " positions",
                    origin);
      }
      const int epoch = epoch_of(in.seq);
      for (size_t t = 0; t < tokens; ++t) {
        EngineRow row;
        row.key = RowKey{in.seq, epoch, out.positions[t]};
        row.origin = RowOrigin{op_index, static_cast<int>(c), static_cast<int>(t)};
        const auto first = out.out.begin() + static_cast<std::ptrdiff_t>(t * row_size_);
        row.values.assign(first, first + static_cast<std::ptrdiff_t>(row_size_));
        run_.rows.push_back(std::move(row));
      }
    }
    return true;
  }

  // The runner's own epoch of a sequence; a sequence out of range (the engine will refuse
  // it) is keyed with epoch 0.
  int epoch_of(int seq) const {
    return seq >= 0 && static_cast<size_t>(seq) < epochs_.size() ? epochs_[static_cast<size_t>(seq)]
                                                                 : 0;
  }

  // Ends the run with `error` at `at`; always false.
  bool fail(std::string error, const RowOrigin& at, EngineErrorKind kind = EngineErrorKind::error) {
    run_.error = std::move(error);
    run_.error_at = at;
    run_.error_kind = kind;
    return false;
  }

  const Scenario& scenario_;
  const TokenTable& table_;
  Engine& engine_;
  const size_t q_size_, k_size_, v_size_, row_size_;
  std::vector<int> epochs_;  // the runner's own epoch counter per sequence
  // Reused across ops: gathered inputs, chunk descriptors and outputs.
  std::vector<float> q_, k_, v_;
  std::vector<ChunkIn> ins_;
  std::vector<ChunkOut> outs_;
  OpChunks op_chunks_;
  EngineRun run_;
};

}  // namespace

EngineRun run_engine(const Scenario& scenario, const TokenTable& table, Engine& engine) {
  return ProgramRun(scenario, table, engine).run();
}

}  // namespace kvfuzz
