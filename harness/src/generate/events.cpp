#include "generate/events.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace kvfuzz {

std::string_view event_name(Event event) {
  switch (event) {
    case Event::page_boundary_crossing:
      return "page-boundary-crossing";
    case Event::chunk_straddles_page:
      return "chunk-straddles-page";
    case Event::decode_after_prefill:
      return "decode-after-prefill";
    case Event::reset_nonempty:
      return "reset-of-nonempty-sequence";
    case Event::reuse_after_reset:
      return "reuse-after-reset";
    case Event::window_slide:
      return "window-slide";
    case Event::split_path:
      return "split-decode-path";
    case Event::batch_mixed_prefix:
      return "batch-with-mixed-prefix-lengths";
    case Event::fork_partial_page:
      return "fork-with-partial-page";
    case Event::truncate_across_page:
      return "truncate-across-page";
    case Event::truncate_shared_page:
      return "truncate-into-shared-page";
  }
  return "?";
}

EventCounts& EventCounts::operator+=(const EventCounts& other) {
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  return *this;
}

EventCounts count_events(const Scenario& scenario, const EngineEdges& edges) {
  const Layout& layout = scenario.layout;
  const int64_t page = std::max(1, layout.page_size);
  EventCounts events;
  // Per (seq, epoch): did a multi-token chunk come first (for decode-after-prefill)?
  std::map<std::pair<int, int>, bool> prefilled;
  // Per op: the start positions of its chunks (for mixed prefix lengths).
  std::map<int, std::pair<int64_t, int64_t>> step_starts;  // op -> (min, max)
  std::set<std::pair<int, int>> started_by_reset;          // (seq, epoch)
  // Per sequence: tokens at the front that sit in full pages shared through a fork (an
  // approximation: it does not notice when the other holder lets go of them).
  std::map<int, int64_t> shared;

  for_each_chunk(
      scenario,
      [&](const PlacedChunk& c) {
        const auto n = static_cast<int64_t>(c.tokens->size());
        if (n == 0) return;
        const int64_t first = c.start, last = c.start + n - 1;
        // Tokens at slot 0 of a page other than the first.
        const int64_t first_boundary = std::max<int64_t>(page, (first + page - 1) / page * page);
        if (first_boundary <= last) {
          events[Event::page_boundary_crossing] += (last - first_boundary) / page + 1;
        }
        if (first / page != last / page) ++events[Event::chunk_straddles_page];
        bool& was_prefilled = prefilled[{c.seq, c.epoch}];
        if (n == 1 && was_prefilled) ++events[Event::decode_after_prefill];
        if (n > 1) was_prefilled = true;
        if (started_by_reset.count({c.seq, c.epoch}) && c.start == 0) {
          ++events[Event::reuse_after_reset];
        }
        if (layout.window) {
          // Rows at p >= window see keys from p - window + 1 > 0.
          events[Event::window_slide] +=
              std::max<int64_t>(0, last - std::max(first, int64_t{*layout.window}) + 1);
        }
        if (n == 1 && last + 1 >= edges.split_threshold &&
            (!layout.window || *layout.window >= edges.split_threshold)) {
          ++events[Event::split_path];
        }
        const auto [it, added] = step_starts.try_emplace(c.op, first, first);
        it->second = {std::min(it->second.first, first), std::max(it->second.second, first)};
      },
      [&](const EpochStart& e) {
        const auto pages = [&](int64_t tokens) { return (tokens + page - 1) / page; };
        switch (e.kind) {
          case OpKind::reset:
            shared[e.seq] = 0;
            started_by_reset.insert({e.seq, e.epoch});
            if (e.ended_length > 0) ++events[Event::reset_nonempty];
            break;
          case OpKind::fork: {
            if (e.inherited % page != 0) ++events[Event::fork_partial_page];
            // Source and destination now share the source's full pages.
            const int64_t full = e.inherited / page * page;
            const int src = scenario.program[static_cast<size_t>(e.op)].src;
            shared[e.seq] = full;
            shared[src] = std::max(shared[src], full);
            break;
          }
          case OpKind::truncate:
            if (pages(e.inherited) < pages(e.ended_length)) ++events[Event::truncate_across_page];
            if (e.inherited % page != 0 && e.inherited < shared[e.seq]) {
              ++events[Event::truncate_shared_page];
            }
            shared[e.seq] = std::min(shared[e.seq], e.inherited / page * page);
            break;
          default:
            break;
        }
      });
  for (const auto& [op, range] : step_starts) {
    if (range.first != range.second) ++events[Event::batch_mixed_prefix];
  }
  return events;
}

int count_class(int64_t count) {
  if (count <= 3) return static_cast<int>(std::max<int64_t>(count, 1) - 1);
  if (count < 8) return 3;
  if (count < 16) return 4;
  if (count < 32) return 5;
  if (count < 128) return 6;
  return 7;
}

std::vector<int> cache_states(const EventCounts& counts) {
  std::vector<int> states;
  for (int e = 0; e < kEventCount; ++e) {
    if (counts.counts[e] > 0) states.push_back(e * kCountClasses + count_class(counts.counts[e]));
  }
  int pair = kEventCount * kCountClasses;
  for (int a = 0; a < kEventCount; ++a) {
    for (int b = a + 1; b < kEventCount; ++b, ++pair) {
      if (counts.counts[a] > 0 && counts.counts[b] > 0) states.push_back(pair);
    }
  }
  return states;
}

std::string cache_state_name(int index) {
  static constexpr const char* kClassNames[kCountClasses] = {"x1",    "x2",     "x3",      "x4-7",
                                                             "x8-15", "x16-31", "x32-127", "x128+"};
  if (index < kEventCount * kCountClasses) {
    return std::string(event_name(static_cast<Event>(index / kCountClasses))) + " " +
           kClassNames[index % kCountClasses];
  }
  int pair = kEventCount * kCountClasses;
  for (int a = 0; a < kEventCount; ++a) {
    for (int b = a + 1; b < kEventCount; ++b, ++pair) {
      if (pair == index) {
        return std::string(event_name(static_cast<Event>(a))) + " + " +
               std::string(event_name(static_cast<Event>(b)));
      }
    }
  }
  return "?";
}

}  // namespace kvfuzz
