// Moves on the program (shrink/moves.h): drop the expect rows, a sequence, runs of ops, a
// chunk, runs of tokens; merge appends, a one-chunk step to an append, truncate and fork
// toward a reset; and the split lookahead's chunk split.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "shrink/moves.h"

namespace kvfuzz::shrinking {

namespace {

// One chunk of the program: an append's tokens (chunk < 0) or chunk `chunk` of a step.
struct ChunkRef {
  size_t op = 0;
  int chunk = -1;
};

std::vector<ChunkRef> chunk_refs(const Scenario& s) {
  std::vector<ChunkRef> refs;
  for (size_t o = 0; o < s.program.size(); ++o) {
    const Op& op = s.program[o];
    if (op.kind == OpKind::append) refs.push_back({o, -1});
    if (op.kind == OpKind::step) {
      for (size_t c = 0; c < op.chunks.size(); ++c) refs.push_back({o, static_cast<int>(c)});
    }
  }
  return refs;
}

const std::vector<int>& tokens_at(const Scenario& s, ChunkRef r) {
  const Op& op = s.program[r.op];
  return r.chunk < 0 ? op.tokens : op.chunks[static_cast<size_t>(r.chunk)].tokens;
}

std::vector<int>& tokens_at(Scenario& s, ChunkRef r) {
  Op& op = s.program[r.op];
  return r.chunk < 0 ? op.tokens : op.chunks[static_cast<size_t>(r.chunk)].tokens;
}

// The parts a bisection level cuts n items into: level k has k parts, [j n / k, (j+1) n / k).
std::pair<int, int> part(int n, int k, int j) {
  return {static_cast<int>(int64_t{j} * n / k), static_cast<int>(int64_t{j + 1} * n / k)};
}

}  // namespace

Made drop_expect(const Scenario& s, int index, Scenario& out) {
  if (index > 0) return Made::end;
  if (s.expect.empty()) return Made::skip;
  out = start_candidate(s);
  return Made::candidate;
}

// Drops sequence `index` with every op and chunk that touches it; later sequences move
// down by one.
Made drop_sequence(const Scenario& s, int index, Scenario& out) {
  if (index >= s.sequences) return Made::end;
  if (s.sequences == 1) return Made::skip;
  const auto renumber = [index](int seq) { return seq > index ? seq - 1 : seq; };
  out = start_candidate(s);
  out.sequences = s.sequences - 1;
  out.program.clear();
  for (const Op& op : s.program) {
    Op kept = op;
    switch (op.kind) {
      case OpKind::append:
      case OpKind::reset:
      case OpKind::truncate:
        if (op.seq == index) continue;
        kept.seq = renumber(op.seq);
        break;
      case OpKind::fork:
        if (op.seq == index || op.src == index) continue;
        kept.seq = renumber(op.seq);
        kept.src = renumber(op.src);
        break;
      case OpKind::step:
        kept.chunks.clear();
        for (const Chunk& chunk : op.chunks) {
          if (chunk.seq != index) kept.chunks.push_back({renumber(chunk.seq), chunk.tokens});
        }
        if (kept.chunks.empty()) continue;
        break;
    }
    out.program.push_back(std::move(kept));
  }
  return Made::candidate;
}

// Drops a run of ops: halves of the program, then quarters, ..., then single ops.
Made drop_ops(const Scenario& s, int index, Scenario& out) {
  const int n = static_cast<int>(s.program.size());
  int seen = 0;
  for (int k = 2; k < 2 * n; k *= 2) {
    for (int j = 0; j < k; ++j) {
      const auto [begin, end] = part(n, k, j);
      if (begin == end || end - begin == n) continue;
      if (seen++ != index) continue;
      out = start_candidate(s);
      out.program.erase(out.program.begin() + begin, out.program.begin() + end);
      return Made::candidate;
    }
  }
  return Made::end;
}

// Drops one chunk of a step that has several.
Made drop_chunk(const Scenario& s, int index, Scenario& out) {
  int seen = 0;
  for (size_t o = 0; o < s.program.size(); ++o) {
    const Op& op = s.program[o];
    if (op.kind != OpKind::step || op.chunks.size() < 2) continue;
    for (size_t c = 0; c < op.chunks.size(); ++c) {
      if (seen++ != index) continue;
      out = start_candidate(s);
      auto& chunks = out.program[o].chunks;
      chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(c));
      return Made::candidate;
    }
  }
  return Made::end;
}

// Drops tokens from chunks, level by level over every chunk: each chunk's halves (front,
// back), then quarters, ..., then single tokens. Never a whole chunk (drop_ops does that).
Made drop_tokens(const Scenario& s, int index, Scenario& out) {
  const std::vector<ChunkRef> refs = chunk_refs(s);
  int longest = 0;
  for (const ChunkRef& r : refs)
    longest = std::max(longest, static_cast<int>(tokens_at(s, r).size()));
  int seen = 0;
  for (int k = 2; k < 2 * longest; k *= 2) {
    for (const ChunkRef& r : refs) {
      const int n = static_cast<int>(tokens_at(s, r).size());
      if (k >= 2 * n) continue;  // this chunk already reached single tokens
      for (int j = 0; j < k; ++j) {
        const auto [begin, end] = part(n, k, j);
        if (begin == end || end - begin == n) continue;
        if (seen++ != index) continue;
        out = start_candidate(s);
        auto& tokens = tokens_at(out, r);
        tokens.erase(tokens.begin() + begin, tokens.begin() + end);
        return Made::candidate;
      }
    }
  }
  return Made::end;
}

// Merges op `index` and the next one when both are appends of the same sequence.
Made merge_appends(const Scenario& s, int index, Scenario& out) {
  const size_t i = static_cast<size_t>(index);
  if (i + 1 >= s.program.size()) return Made::end;
  const Op& a = s.program[i];
  const Op& b = s.program[i + 1];
  if (a.kind != OpKind::append || b.kind != OpKind::append || a.seq != b.seq) return Made::skip;
  out = start_candidate(s);
  auto& tokens = out.program[i].tokens;
  tokens.insert(tokens.end(), b.tokens.begin(), b.tokens.end());
  out.program.erase(out.program.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  return Made::candidate;
}

// A step with a single chunk becomes an append.
Made step_to_append(const Scenario& s, int index, Scenario& out) {
  const size_t i = static_cast<size_t>(index);
  if (i >= s.program.size()) return Made::end;
  const Op& op = s.program[i];
  if (op.kind != OpKind::step || op.chunks.size() != 1) return Made::skip;
  out = start_candidate(s);
  out.program[i] = Op::append(op.chunks[0].seq, op.chunks[0].tokens);
  return Made::candidate;
}

// Truncate and fork toward the plain reset (which also starts a new epoch), then a
// truncate's `keep` toward 0.
Made simplify_epoch_ops(const Scenario& s, int index, Scenario& out) {
  const size_t i = static_cast<size_t>(index / 4);
  const int variant = index % 4;
  if (i >= s.program.size()) return Made::end;
  const Op& op = s.program[i];
  if (op.kind != OpKind::truncate && op.kind != OpKind::fork) return Made::skip;
  out = start_candidate(s);
  if (variant == 0) {
    out.program[i] = Op::reset(op.seq);
    return Made::candidate;
  }
  if (op.kind != OpKind::truncate) return Made::skip;
  const int64_t keep[] = {0, op.keep / 2, op.keep - 1};
  const int64_t target = keep[variant - 1];
  if (target < 0 || target >= op.keep) return Made::skip;
  out.program[i].keep = target;
  return Made::candidate;
}

Made split_chunk(const Scenario& s, int index, Scenario& out) {
  int seen = 0;
  for (const ChunkRef& r : chunk_refs(s)) {
    const int n = static_cast<int>(tokens_at(s, r).size());
    std::vector<int> points;
    for (int point : {n / 2, 1, n - 1}) {
      if (point >= 1 && point < n &&
          std::find(points.begin(), points.end(), point) == points.end()) {
        points.push_back(point);
      }
    }
    for (int point : points) {
      if (seen++ != index) continue;
      out = start_candidate(s);
      auto& tokens = tokens_at(out, r);
      const int seq = r.chunk < 0 ? s.program[r.op].seq
                                  : s.program[r.op].chunks[static_cast<size_t>(r.chunk)].seq;
      Op second = Op::append(seq, std::vector<int>(tokens.begin() + point, tokens.end()));
      tokens.resize(static_cast<size_t>(point));
      out.program.insert(out.program.begin() + static_cast<std::ptrdiff_t>(r.op) + 1,
                         std::move(second));
      return Made::candidate;
    }
  }
  return Made::end;
}

}  // namespace kvfuzz::shrinking
