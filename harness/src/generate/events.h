// Cache-state coverage: the domain events a scenario makes an engine go through. Code
// coverage says which lines ran; these say which cache states were reached (a decode into
// a fresh page, a reset of a sequence that held tokens, a decode long enough for the split
// path...). `kvfuzz check` prints how often each was hit and names those never hit; the
// fuzz targets feed them to libFuzzer as extra counters.
//
// They are computed from the scenario alone (program + layout), the way a real caller
// sees its requests, and the engine edges the generator aims at (GeneratorOptions::edges),
// so they mean the same for every engine with those edges.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvfuzz/generator.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

enum class Event {
  page_boundary_crossing,  // a token lands on the first slot of a page after the first page
  chunk_straddles_page,    // one chunk has tokens on both sides of a page boundary
  decode_after_prefill,    // a one-token chunk after a multi-token chunk in the same epoch
  reset_nonempty,          // a reset of a sequence whose epoch held tokens
  reuse_after_reset,       // tokens fed to a sequence after a reset
  window_slide,            // a row whose window excludes position 0
  split_path,              // a one-token chunk seeing >= edges.split_threshold keys
  batch_mixed_prefix,      // a step whose chunks start at different cached lengths
  fork_partial_page,       // a fork whose source ends inside a page (the copied page)
  truncate_across_page,    // a truncate that gives back at least one page
  truncate_shared_page,    // a truncate that ends inside a page a fork still shares
};

constexpr int kEventCount = 11;

std::string_view event_name(Event event);

struct EventCounts {
  std::array<int64_t, kEventCount> counts{};
  int64_t& operator[](Event e) { return counts[static_cast<size_t>(e)]; }
  int64_t operator[](Event e) const { return counts[static_cast<size_t>(e)]; }
  EventCounts& operator+=(const EventCounts& other);
};

EventCounts count_events(const Scenario& scenario, const EngineEdges& edges);

// Cache states: finer than "which events": for each event, how often it happened in one
// scenario, in libFuzzer's count classes (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+), and for
// each pair of events, that both happened in the same scenario. The fuzz targets feed the
// same information to libFuzzer as extra counters; campaigns report how many were reached.
constexpr int kCountClasses = 8;
constexpr int kEventPairCount = kEventCount * (kEventCount - 1) / 2;
constexpr int kCacheStateCount = kEventCount * kCountClasses + kEventPairCount;

int count_class(int64_t count);  // 0 for 1, ..., 7 for 128 and more; count >= 1
// Indices in [0, kCacheStateCount) of the states a scenario with these counts reaches.
std::vector<int> cache_states(const EventCounts& counts);
std::string cache_state_name(int index);  // "fork-with-partial-page x4-7", "a + b"

}  // namespace kvfuzz
