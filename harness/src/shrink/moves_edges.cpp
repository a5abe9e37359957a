// Moves that cut tokens but keep where a query stands against an engine's edges
// (shrink/moves.h): the split path's threshold and partitions, the window's edge, the
// pages. A plain cut of d keys moves every later key d places: a failure that needs a key
// in a given slot of a partition or a page, a decode that sees exactly a partition
// multiple, or a key just outside the window is lost by every single cut. These cut d
// keys at once where the slots of the others survive, shrink the window by d when the cut
// lies inside it, and lower every later truncate's keep by the cut tokens it kept.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "kvfuzz/generator.h"
#include "shrink/moves.h"

namespace kvfuzz::shrinking {

namespace {

// The split path's lengths: the defaults are the built-in flash engine's (EngineEdges).
constexpr EngineEdges kEdges{};

// Where one (sequence, epoch) stands: its length, where its own tokens start (after those
// a truncate or fork handed it), and its last query (the last token fed; for the split
// path the last one-token chunk).
struct Epoch {
  int seq = 0;
  int epoch = 0;
  int64_t fed_from = 0;  // positions below this were inherited
  int64_t length = 0;
  int64_t last_query = -1;
  int64_t last_decode = -1;  // position of the last one-token chunk, -1 without one
};

// Every (sequence, epoch) that was fed a token, in order of first appearance.
std::vector<Epoch> epochs_of(const Scenario& s) {
  std::vector<Epoch> epochs;
  std::map<std::pair<int, int>, size_t> index;
  for_each_chunk(s, [&](const PlacedChunk& c) {
    const auto key = std::make_pair(c.seq, c.epoch);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, epochs.size()).first;
      epochs.push_back({c.seq, c.epoch, c.start, c.start, -1, -1});
    }
    Epoch& e = epochs[it->second];
    const auto n = static_cast<int64_t>(c.tokens->size());
    e.length = c.start + n;
    e.last_query = e.length - 1;
    if (n == 1) e.last_decode = c.start;
  });
  return epochs;
}

// The first key the query at `pos` sees.
int64_t first_visible(const Layout& l, int64_t pos) {
  return l.window ? std::max<int64_t>(0, pos - *l.window + 1) : 0;
}

// One cut: positions [lo, hi) of an epoch.
struct Cut {
  int64_t lo = 0;
  int64_t hi = 0;
};

// For every truncate op of `s` (by op index), how many of the positions it keeps the cut
// removes: the cut positions of epoch `e`, followed through forks (which copy them) and
// truncates (which keep a prefix), so that each truncate can keep the same tokens.
std::map<size_t, int64_t> cut_from_keeps(const Scenario& s, const Epoch& e, Cut cut) {
  std::map<size_t, int64_t> cut_kept;
  std::vector<std::vector<bool>> marks(static_cast<size_t>(s.sequences));  // [seq][pos]
  std::vector<int> epoch(static_cast<size_t>(s.sequences), 0);
  for (size_t o = 0; o < s.program.size(); ++o) {
    const Op& op = s.program[o];
    const auto seq = static_cast<size_t>(op.seq);
    switch (op.kind) {
      case OpKind::reset:
        marks[seq].clear();
        ++epoch[seq];
        break;
      case OpKind::truncate: {
        const auto keep =
            static_cast<size_t>(std::clamp<int64_t>(op.keep, 0, std::ssize(marks[seq])));
        cut_kept[o] = std::count(marks[seq].begin(),
                                 marks[seq].begin() + static_cast<std::ptrdiff_t>(keep), true);
        marks[seq].resize(keep);
        ++epoch[seq];
        break;
      }
      case OpKind::fork:
        marks[seq] = marks[static_cast<size_t>(op.src)];
        ++epoch[seq];
        break;
      case OpKind::append:
      case OpKind::step:
        for (const Chunk& chunk : op.batch()) {
          std::vector<bool>& m = marks[static_cast<size_t>(chunk.seq)];
          const bool in_e = chunk.seq == e.seq && epoch[static_cast<size_t>(chunk.seq)] == e.epoch;
          for (size_t i = 0; i < chunk.tokens.size(); ++i) {
            const auto pos = std::ssize(m);
            m.push_back(in_e && pos >= cut.lo && pos < cut.hi);
          }
        }
        break;
    }
  }
  return cut_kept;
}

// `s` without positions [cut.lo, cut.hi) of epoch `e`, every one fed in that epoch. Chunks
// left empty go, and so do ops left without chunks; every later truncate keeps the same
// tokens (its `keep` less the cut ones it kept). When the cut lies inside the window of
// the query at `query` and that query has keys beyond the edge, the window shrinks by the
// cut's length, so the query keeps the same keys on each side of its edge.
Made cut_positions(const Scenario& s, const Epoch& e, Cut cut, int64_t query, Scenario& out) {
  if (cut.lo < e.fed_from || cut.hi <= cut.lo || cut.hi > e.length) return Made::skip;
  out = start_candidate(s);
  // The keeps first: the ops still have the input's indices.
  for (const auto& [op, cut_kept] : cut_from_keeps(s, e, cut)) {
    out.program[op].keep -= cut_kept;
  }
  std::vector<std::pair<PlacedChunk, std::vector<int>*>> hit;
  for_each_chunk(s, [&](const PlacedChunk& c) {
    if (c.seq != e.seq || c.epoch != e.epoch) return;
    const auto n = static_cast<int64_t>(c.tokens->size());
    if (c.start + n <= cut.lo || c.start >= cut.hi) return;
    Op& op = out.program[static_cast<size_t>(c.op)];
    std::vector<int>* tokens =
        op.kind == OpKind::append ? &op.tokens : &op.chunks[static_cast<size_t>(c.chunk)].tokens;
    hit.emplace_back(c, tokens);
  });
  // From the back, so that erasing a chunk or an op moves nothing still to be visited.
  for (auto it = hit.rbegin(); it != hit.rend(); ++it) {
    const PlacedChunk& c = it->first;
    std::vector<int>& tokens = *it->second;
    const int64_t from = std::max(cut.lo, c.start) - c.start;
    const int64_t to = std::min(cut.hi, c.start + static_cast<int64_t>(tokens.size())) - c.start;
    tokens.erase(tokens.begin() + from, tokens.begin() + to);
    if (!tokens.empty()) continue;
    Op& op = out.program[static_cast<size_t>(c.op)];
    if (op.kind == OpKind::step) op.chunks.erase(op.chunks.begin() + c.chunk);
    if (op.kind == OpKind::append || op.chunks.empty()) {
      out.program.erase(out.program.begin() + c.op);
    }
  }
  const Layout& l = s.layout;
  if (l.window && query > *l.window - 1 && cut.lo >= first_visible(l, query) && cut.hi <= query) {
    const int64_t window = *l.window - (cut.hi - cut.lo);
    if (window < 1) return Made::skip;
    out.layout.window = static_cast<int>(window);
  }
  return Made::candidate;
}

void add_cut(std::vector<Cut>& cuts, Cut cut) {
  for (const Cut& c : cuts) {
    if (c.lo == cut.lo && c.hi == cut.hi) return;
  }
  cuts.push_back(cut);
}

// The cuts of one epoch's last decode that keep it on the split path: the keys just
// before it, so that it sees exactly the threshold; the first keys it sees, likewise;
// and each whole partition before the one that holds it, keeping every other key's slot
// in its partition.
std::vector<Cut> split_cuts(const Layout& l, const Epoch& e) {
  std::vector<Cut> cuts;
  const int64_t query = e.last_decode;
  if (query < 0) return cuts;
  const int64_t lo = first_visible(l, query);
  const int64_t seen = query - lo + 1;
  const int64_t threshold = std::max(1, kEdges.split_threshold);
  const int64_t partition = std::max(1, kEdges.partition_keys);
  if (seen <= threshold) return cuts;
  const int64_t excess = seen - threshold;
  add_cut(cuts, {query - excess, query});
  add_cut(cuts, {lo, lo + excess});
  if (seen - partition < threshold) return cuts;
  for (int64_t start = lo; start + partition <= query; start += partition) {
    add_cut(cuts, {start, start + partition});
  }
  return cuts;
}

// The cuts inside the window of an epoch's last query, when some key lies beyond its
// edge: all of the window but the query, half of it, one key, each right before the query
// and right after the edge. The window shrinks with the cut (cut_positions).
std::vector<Cut> window_cuts(const Layout& l, const Epoch& e) {
  std::vector<Cut> cuts;
  const int64_t query = e.last_query;
  if (!l.window || query < *l.window) return cuts;  // no key beyond the edge
  const int64_t window = *l.window;
  const int64_t edge = query - window + 1;  // the first key inside
  for (int64_t d : {window - 1, window / 2, int64_t{1}}) {
    if (d < 1 || d >= window) continue;
    add_cut(cuts, {query - d, query});
    add_cut(cuts, {edge, edge + d});
  }
  return cuts;
}

// Runs of whole pages of an epoch's own tokens (pages of the layout's page size from
// position 0): all of them, halves, quarters, ... down to 32 parts. Every token after a
// cut keeps its slot in its page, so a failure that needs a token at a page's edge (a
// truncate into a page a fork shares, a read past a page's tail) survives the cut.
std::vector<Cut> page_cuts(const Layout& l, const Epoch& e) {
  std::vector<Cut> cuts;
  const int64_t page = l.page_size;
  if (page < 2) return cuts;  // pages of one token: drop_tokens makes these cuts
  const int64_t first = (e.fed_from + page - 1) / page;  // the first page all fed here
  const int64_t end = e.length / page;                   // past the last full page
  const int64_t n = end - first;
  for (int64_t k = 1; k <= std::min<int64_t>(n, 32); k *= 2) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t a = first + j * n / k, b = first + (j + 1) * n / k;
      if (a < b) add_cut(cuts, {a * page, b * page});
    }
  }
  return cuts;
}

// Candidate `index` over every epoch's cuts, in order.
Made nth_cut(const Scenario& s, int index, std::vector<Cut> (*cuts_of)(const Layout&, const Epoch&),
             bool split, Scenario& out) {
  int seen = 0;
  for (const Epoch& e : epochs_of(s)) {
    for (const Cut& cut : cuts_of(s.layout, e)) {
      if (seen++ != index) continue;
      return cut_positions(s, e, cut, split ? e.last_decode : e.last_query, out);
    }
  }
  return Made::end;
}

}  // namespace

Made cut_to_split_edge(const Scenario& s, int index, Scenario& out) {
  return nth_cut(s, index, split_cuts, true, out);
}

Made cut_inside_window(const Scenario& s, int index, Scenario& out) {
  return nth_cut(s, index, window_cuts, false, out);
}

Made cut_whole_pages(const Scenario& s, int index, Scenario& out) {
  return nth_cut(s, index, page_cuts, false, out);
}

}  // namespace kvfuzz::shrinking
