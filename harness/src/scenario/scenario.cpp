#include "kvfuzz/scenario.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace kvfuzz {

const char* rope_style_name(RopeStyle style) {
  return style == RopeStyle::interleaved ? "interleaved" : "half_split";
}

double Layout::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

bool Layout::has_features() const {
  return softcap || !sinks.empty() || !alibi.empty() || chunked_local || value_from_key ||
         rope_style != RopeStyle::half_split || rope_dims.has_value();
}

double Layout::stored_sink(int q_head) const {
  // f32 keeps the fixture's value: an engine's own cast to float is arithmetic noise the
  // tolerance covers (step 13), while f16 and bf16 move a sink by far more.
  const double sink = sinks[static_cast<size_t>(q_head)];
  return dtype == DType::f32 ? sink : round_to_dtype(static_cast<float>(sink), dtype);
}

std::vector<double> Layout::stored_sinks() const {
  std::vector<double> stored;
  for (size_t h = 0; h < sinks.size(); ++h) stored.push_back(stored_sink(static_cast<int>(h)));
  return stored;
}

int64_t Layout::first_visible(int64_t pos) const {
  int64_t lo = window ? std::max<int64_t>(0, pos - std::max(1, *window) + 1) : 0;
  if (chunked_local) {
    const int64_t size = std::max(1, *chunked_local);
    lo = std::max(lo, pos / size * size);
  }
  return lo;
}

std::vector<double> standard_alibi_slopes(int heads) {
  int n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<double> slopes;
  slopes.reserve(static_cast<size_t>(std::max(0, heads)));
  for (int h = 0; h < heads; ++h) {
    // Exact for powers of two up to 8 heads; exp2 of a dyadic exponent otherwise.
    const double exponent = h < n ? -8.0 * (h + 1) / n : -4.0 * (2 * (h - n) + 1) / n;
    slopes.push_back(std::exp2(exponent));
  }
  return slopes;
}

int token_count(const TokenSource& source) {
  if (const auto* tokens = std::get_if<std::vector<ExplicitToken>>(&source)) {
    return static_cast<int>(tokens->size());
  }
  return std::get<GeneratedTokens>(source).count;
}

std::vector<Chunk> Op::batch() const {
  switch (kind) {
    case OpKind::append:
      return {Chunk{seq, tokens}};
    case OpKind::step:
      return chunks;
    case OpKind::reset:
    case OpKind::truncate:
    case OpKind::fork:
      return {};
  }
  return {};
}

Op Op::append(int seq, std::vector<int> tokens) {
  Op op;
  op.kind = OpKind::append;
  op.seq = seq;
  op.tokens = std::move(tokens);
  return op;
}

Op Op::step(std::vector<Chunk> chunks) {
  Op op;
  op.kind = OpKind::step;
  op.chunks = std::move(chunks);
  return op;
}

Op Op::reset(int seq) {
  Op op;
  op.kind = OpKind::reset;
  op.seq = seq;
  return op;
}

Op Op::truncate(int seq, int64_t keep) {
  Op op;
  op.kind = OpKind::truncate;
  op.seq = seq;
  op.keep = keep;
  return op;
}

Op Op::fork(int src, int dst) {
  Op op;
  op.kind = OpKind::fork;
  op.src = src;
  op.seq = dst;
  return op;
}

std::string_view poison_name(Poison poison) {
  switch (poison) {
    case Poison::nan:
      return "nan";
    case Poison::pos_inf:
      return "+inf";
    case Poison::neg_inf:
      return "-inf";
    case Poison::huge:
      return "huge";
  }
  return "?";
}

std::optional<Poison> parse_poison(std::string_view name) {
  for (Poison p : {Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge}) {
    if (poison_name(p) == name) return p;
  }
  return std::nullopt;
}

namespace {

// Per (sequence, epoch), its length: tokens inherited (truncate, fork) plus tokens fed.
std::map<std::pair<int, int>, int64_t> epoch_lengths(const Scenario& scenario) {
  std::map<std::pair<int, int>, int64_t> lengths;
  for_each_chunk(
      scenario,
      [&](const PlacedChunk& c) {
        lengths[{c.seq, c.epoch}] = c.start + static_cast<int64_t>(c.tokens->size());
      },
      [&](const EpochStart& e) {
        lengths[{e.seq, e.epoch}] = e.inherited;
      });
  return lengths;
}

}  // namespace

void for_each_chunk(const Scenario& scenario, const std::function<void(const PlacedChunk&)>& visit,
                    const std::function<void(const EpochStart&)>& visit_epoch) {
  struct SeqState {
    int epoch = 0;
    int64_t length = 0;
  };
  std::map<int, SeqState> state;
  for (size_t o = 0; o < scenario.program.size(); ++o) {
    const Op& op = scenario.program[o];
    if (op.kind == OpKind::reset || op.kind == OpKind::truncate || op.kind == OpKind::fork) {
      const SeqState ended = state[op.seq];
      int64_t inherited = 0;
      if (op.kind == OpKind::truncate) inherited = std::clamp<int64_t>(op.keep, 0, ended.length);
      if (op.kind == OpKind::fork) inherited = state[op.src].length;
      state[op.seq] = SeqState{ended.epoch + 1, inherited};
      if (visit_epoch) {
        visit_epoch(EpochStart{static_cast<int>(o), op.kind, op.seq, ended.epoch + 1, ended.length,
                               inherited});
      }
      continue;
    }
    const auto place = [&](int chunk, int seq, const std::vector<int>& tokens) {
      SeqState& s = state[seq];
      visit(PlacedChunk{static_cast<int>(o), chunk, seq, s.epoch, s.length, &tokens});
      s.length += static_cast<int64_t>(tokens.size());
    };
    if (op.kind == OpKind::append) {
      place(0, op.seq, op.tokens);
    } else {
      for (size_t c = 0; c < op.chunks.size(); ++c) {
        place(static_cast<int>(c), op.chunks[c].seq, op.chunks[c].tokens);
      }
    }
  }
}

int program_tokens(const Scenario& scenario) {
  int tokens = 0;
  for (const Op& op : scenario.program) {
    for (const Chunk& chunk : op.batch()) tokens += static_cast<int>(chunk.tokens.size());
  }
  return tokens;
}

int max_epoch_length(const Scenario& scenario) {
  int64_t longest = 0;
  for (const auto& [seq_epoch, n] : epoch_lengths(scenario)) longest = std::max(longest, n);
  return static_cast<int>(std::min<int64_t>(longest, INT32_MAX));
}

// Enough pages for every sequence's longest epoch at once, plus one page that is never
// handed out before the others, so a pool always has a poisoned page nobody owns.
int required_pool_pages(const Scenario& scenario) {
  const int64_t page = std::max(1, scenario.layout.page_size);
  std::map<int, int64_t> longest;  // per sequence
  for (const auto& [seq_epoch, n] : epoch_lengths(scenario)) {
    longest[seq_epoch.first] = std::max(longest[seq_epoch.first], n);
  }
  int64_t pages = 1;
  for (const auto& [seq, n] : longest) pages += (n + page - 1) / page;
  return static_cast<int>(std::min<int64_t>(pages, INT32_MAX));
}

std::vector<LogicalStream> logical_streams(const Scenario& scenario) {
  std::vector<LogicalStream> streams;
  std::map<std::pair<int, int>, size_t> index;  // (seq, epoch) -> streams[i]
  std::map<int, std::vector<int>> held;         // per sequence: the tokens it holds now
  for_each_chunk(
      scenario,
      [&](const PlacedChunk& c) {
        std::vector<int>& tokens = held[c.seq];
        if (c.tokens->empty()) return;
        const auto [it, added] = index.try_emplace({c.seq, c.epoch}, streams.size());
        if (added) {
          streams.push_back(
              LogicalStream{c.seq, c.epoch, tokens, static_cast<int64_t>(tokens.size())});
        }
        tokens.insert(tokens.end(), c.tokens->begin(), c.tokens->end());
        auto& stream = streams[it->second].tokens;
        stream.insert(stream.end(), c.tokens->begin(), c.tokens->end());
      },
      [&](const EpochStart& e) {
        std::vector<int>& tokens = held[e.seq];
        if (e.kind == OpKind::fork) {
          tokens = held[scenario.program[static_cast<size_t>(e.op)].src];
        } else {
          tokens.resize(static_cast<size_t>(e.inherited));
        }
      });
  return streams;
}

}  // namespace kvfuzz
