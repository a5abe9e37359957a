#include "generate/windows_at_edges.h"

#include <algorithm>

namespace kvfuzz {

WindowRunChoices pick_window_run(ChoiceSource& c) {
  WindowRunChoices w;
  w.chunk_offset = pick_offset(c);
  w.periods_past = c.pick_int(1, 4);
  return w;
}

WindowRun window_run(const WindowRunChoices& choices, int window, int page_size,
                     const EngineEdges& edges) {
  const int period = std::max({1, page_size, edges.partition_keys});
  return {std::max(1, window + choices.chunk_offset), window + choices.periods_past * period};
}

}  // namespace kvfuzz
