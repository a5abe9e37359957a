// The scenario variants behind the invariance properties (property.h), one builder per
// property, named after it. Each builds a variant that differs from its base in the
// property's dimension only, together with the map from the variant's (sequence, epoch)
// streams to the base's, so that rows can be paired by key (sequence, epoch, absolute
// position):
//
//   schedule_variant   the same token streams under other chunk boundaries
//   layout_variant     another page size and another physical page order
//   poison_variant     another poison kind
//   reset_variants     each (sequence, epoch >= 1) alone on a fresh engine
//   batch_variant      one sequence alone, every step reduced to its own chunk
//
// A variant's description, which reports print, starts with its property's name (one word
// per dimension): "schedule: 2 run(s) of forwards re-split ...", "reset: seq 0 epoch 1 ...".
//
// Every choice is a pure function of the scenario (through variant_seed), so a property
// judges the same scenario the same way every time; the shrinker relies on that.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

// A (sequence, epoch) pair.
using StreamId = std::pair<int, int>;

struct ScenarioVariant {
  Scenario scenario;        // valid whenever the base is; `expect` is always empty
  std::string description;  // one line: which transformation and what it changed
  // Variant stream -> base stream. Rows of the variant's streams that are not in the map
  // are not compared (the isolation variants map exactly the streams they replay).
  std::map<StreamId, StreamId> streams;
};

// What the run depends on (layout, tokens, sequences, program, placement): a variant
// equal to its base in all of these changes nothing and need not run.
bool same_run(const Scenario& a, const Scenario& b);

// A 64-bit hash of what the run depends on (not name, note, expect or provenance). The
// variants draw their choices from a PRNG seeded with it.
uint64_t variant_seed(const Scenario& scenario);

// schedule: every maximal run of consecutive forwards with the same members (appends to one
// sequence, or steps over the same sequences in the same order) is re-split per member
// into another number of forwards or at other cut points. Every sequence's token stream,
// the members of every forward, and where resets fall stay as they were. A run that
// gives some member a single token cannot change.
ScenarioVariant schedule_variant(const Scenario& scenario, uint64_t seed);

// layout: another page size (from 1, 2, 3, 4, 5, 8, 16, 32) and another page order
// (identity, reversed or a shuffle; never the base's order kind unless it was a shuffle).
// The page size is drawn among those that move some decode (one-token forward) between
// ending inside a page and ending on a page's last slot (else some other forward; else
// any): where a forward ends relative to its last page is where a cache's last-page
// handling differs. Spare pool capacity (pages beyond what the program needs) is kept in
// slots.
ScenarioVariant layout_variant(const Scenario& scenario, uint64_t seed);

// poison: a non-finite poison becomes `huge`; `huge` becomes nan, +inf or -inf. Finite
// against non-finite is the pairing that makes a read of poisoned bytes visible whatever
// the scores do with it.
ScenarioVariant poison_variant(const Scenario& scenario, uint64_t seed);

// reset: one variant per (sequence, epoch >= 1) that is fed tokens, in order of first
// appearance: that epoch's forwards alone (same chunks; steps reduced to its own chunk) on
// a fresh engine, as its epoch 0. An epoch started by a truncate or a fork first gets the
// tokens it inherited as one append (their rows are not compared). Same sequence id,
// layout and page pool. Maps (seq, 0) -> (seq, epoch).
std::vector<ScenarioVariant> reset_variants(const Scenario& scenario);

// batch: sequence `seq`'s ops alone (its appends, resets and truncates; every step reduced
// to its own chunk; a fork into it becomes a reset and an append of the source's tokens,
// a fork out of it disappears), same sequence id, layout and page pool. Maps (seq, e) ->
// (seq, e) for its epochs.
ScenarioVariant batch_variant(const Scenario& scenario, int seq);

// The sequences whose rows batch invariance compares: every sequence that holds tokens,
// when at least two do (otherwise there are no neighbours and the list is empty).
std::vector<int> sequences_with_neighbours(const Scenario& scenario);

// The variants `property` compares the scenario with (none for prefix, which compares it
// with the reference): its builder's, seeded with variant_seed, batch's one per sequence
// with neighbours; a variant that would run as the scenario does (same_run) is left out.
std::vector<ScenarioVariant> property_variants(Property property, const Scenario& scenario);

}  // namespace kvfuzz
