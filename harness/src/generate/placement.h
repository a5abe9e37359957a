// The placement of one scenario's pages: the poison in pages nobody wrote (NaN first), a
// few spare pages nobody is handed (none first), the page order (identity first, then
// reversed, shuffled and interleaved between sequences, so that a kernel that assumes a
// sequence's pages are contiguous or in order reads the wrong K/V or poison), and now and
// then a wide pool past 2^8, 2^15 or 2^16 pages (integer_limits.h). The choices are drawn
// before the program; the page list is resolved after it, since the pool's size and the
// order sequences take pages in depend on the program.
#pragma once

#include "generate/integer_limits.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

enum class OrderKind { identity, reversed, shuffled, interleaved };

// NaN poison first; no spare pages first (sometimes a few that nobody is handed, still
// poisoned); identity order first, then reversed, shuffled and interleaved.
struct PlacementChoices {
  Poison poison = Poison::nan;
  int spare = 0;
  OrderKind order = OrderKind::identity;
  WidePoolChoices wide;  // integer_limits.h: sometimes a pool past 2^8, 2^15 or 2^16 pages
};

PlacementChoices pick_placement(ChoiceSource& c, bool model_level);

// The order a kernel launcher on the CPU runs a block's threads in (thread_schedule.h):
// thread order at lo. Two choices, the seed drawn whatever the order.
ThreadSchedule pick_thread_schedule(ChoiceSource& c);

// The placement for the built scenario `s` (its program known): the pool it needs plus
// the spare pages, in the chosen order (a shuffle draws its swaps here, last).
Placement resolve_pages(ChoiceSource& c, const PlacementChoices& choices, const Scenario& s);

}  // namespace kvfuzz
