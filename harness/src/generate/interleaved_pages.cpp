// Pages interleaved between sequences (generator.h, interleaved_page_order): an explicit
// page list in which physically consecutive pages alternate between the sequences that take
// them, found by replaying how a paged engine hands out pages over the program. A kernel
// that assumes a sequence's pages are physically contiguous then reads a neighbour's K/V or
// poison. Draws nothing.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvfuzz/generator.h"

namespace kvfuzz {

namespace {

// The entries of a page-order list of `pool` entries, grouped by the sequence that first
// takes them when a paged engine runs the program, in the order it takes them; the last
// group holds the entries nobody takes. It replays kernels/cpu/page_pool.cpp: the chunks of a
// step reserve pages in order, a sequence takes a new page when it grows past its last one,
// a reset or truncate puts pages nobody else holds back at the front of the free list
// (reused before fresh ones), and a fork shares the source's pages but copies a partial one.
std::vector<std::vector<int>> first_takers(const Scenario& s, int pool) {
  const auto sequences = static_cast<size_t>(s.sequences);
  const int64_t page = s.layout.page_size;
  std::vector<int> free_list(static_cast<size_t>(pool));  // back: the next one handed out
  for (int i = 0; i < pool; ++i) free_list[static_cast<size_t>(i)] = pool - 1 - i;
  std::vector<std::vector<int>> held(sequences), groups(sequences + 1);
  std::vector<int64_t> length(sequences, 0);
  std::vector<bool> taken(static_cast<size_t>(pool), false);
  // Pages back to the front of the free list once no sequence holds them (fork shares).
  const auto release = [&](size_t seq, size_t keep_pages) {
    auto& pages = held[seq];
    for (size_t i = pages.size(); i > keep_pages; --i) {
      const int entry = pages[i - 1];
      pages.pop_back();
      const bool shared = std::any_of(held.begin(), held.end(), [&](const std::vector<int>& h) {
        return std::find(h.begin(), h.end(), entry) != h.end();
      });
      if (!shared) free_list.push_back(entry);
    }
  };
  const auto take = [&](size_t seq) {
    const int entry = free_list.back();
    free_list.pop_back();
    held[seq].push_back(entry);
    if (!taken[static_cast<size_t>(entry)]) groups[seq].push_back(entry);
    taken[static_cast<size_t>(entry)] = true;
  };
  for (const Op& op : s.program) {
    const auto target = static_cast<size_t>(op.seq);
    if (op.kind == OpKind::reset) {
      release(target, 0);
      length[target] = 0;
    } else if (op.kind == OpKind::truncate) {
      release(target, static_cast<size_t>((op.keep + page - 1) / page));
      length[target] = op.keep;
    } else if (op.kind == OpKind::fork) {
      const auto src = static_cast<size_t>(op.src);
      release(target, 0);
      length[target] = length[src];
      held[target] = held[src];
      if (length[src] % page != 0 && !held[target].empty()) {  // the partial page is copied
        held[target].pop_back();
        if (!free_list.empty()) take(target);
      }
    }
    for (const Chunk& chunk : op.batch()) {
      const auto seq = static_cast<size_t>(chunk.seq);
      length[seq] += static_cast<int64_t>(chunk.tokens.size());
      while (static_cast<int64_t>(held[seq].size()) * page < length[seq] && !free_list.empty()) {
        take(seq);
      }
    }
  }
  for (int entry = 0; entry < pool; ++entry) {
    if (!taken[static_cast<size_t>(entry)]) groups[sequences].push_back(entry);
  }
  return groups;
}

}  // namespace

// Interleaved between sequences: an explicit list in which physically consecutive pages
// alternate between the sequences (and the pages nobody takes). Physical page 0 becomes
// the first page sequence 0 takes, page 1 the first page of the next sequence that takes
// one, ..., then every sequence's second page, and so on: the list entry that sequence s
// takes as its k-th new page holds physical page (round k, lane s). A kernel that assumes
// a sequence's pages are physically contiguous (first page + logical index) then reads a
// neighbour's K/V or poison. With fewer than two sequences taking pages, the pool grows so
// that unused pages alternate with the one sequence's pages.
std::vector<int> interleaved_page_order(const Scenario& s, int pool) {
  auto groups = first_takers(s, pool);
  const auto busy = std::count_if(groups.begin(), groups.end() - 1,
                                  [](const std::vector<int>& g) { return !g.empty(); });
  if (busy < 2) {
    size_t owned = 0;
    for (auto g = groups.begin(); g != groups.end() - 1; ++g) owned += g->size();
    const int wanted = static_cast<int>(2 * owned) - 1;
    if (wanted > pool) groups = first_takers(s, pool = wanted);
  }
  std::vector<int> pages(static_cast<size_t>(pool));
  int physical = 0;
  for (size_t round = 0; physical < pool; ++round) {
    for (const auto& group : groups) {
      if (round < group.size()) pages[static_cast<size_t>(group[round])] = physical++;
    }
  }
  return pages;
}

}  // namespace kvfuzz
