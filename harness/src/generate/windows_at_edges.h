// Windows at edges with long decode runs past them (issue 15): a program step that feeds a
// windowed sequence one chunk of the window's length (on it, one below or one above: the
// chunk's rows see the window start cutting at its first, last or no row), then one-token
// decodes until the window has slid past that chunk and over one to four pages or split
// partitions more (the longer of the two), so that the window's first key lands on every
// slot of a page, on page and partition boundaries, and decode queries past the split
// threshold see only windowed keys. pick_window (layout.cpp) puts the window itself on,
// one below and one above page sizes, tiles, partitions, the split threshold and short
// chunk lengths; this step makes the decodes that cross those edges, which a program of
// short appends reaches only now and then.
#pragma once

#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {

// Two choices, always drawn (fixed arity): the chunk's offset from the window (0, +1, -1)
// and how many edge periods the decodes go past the chunk (1 first).
struct WindowRunChoices {
  int chunk_offset = 0;
  int periods_past = 1;
};

WindowRunChoices pick_window_run(ChoiceSource& c);

// The step's lengths for `window` (>= 1): the chunk (at least 1) and the decodes after it,
// window + periods_past x max(page_size, partition_keys) of them: the last decode's window
// starts that far past the chunk's first token. The program clamps both to its room.
struct WindowRun {
  int chunk = 1;
  int decodes = 1;
};

WindowRun window_run(const WindowRunChoices& choices, int window, int page_size,
                     const EngineEdges& edges);

}  // namespace kvfuzz
