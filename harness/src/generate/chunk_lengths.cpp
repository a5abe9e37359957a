// Chunk lengths aimed at edges (chunk_lengths.h): an edge position, and the length that
// reaches it or another kind of length, all candidates drawn.
#include "generate/chunk_lengths.h"

#include <algorithm>
#include <array>

namespace kvfuzz {

namespace {

// An absolute position on, one after or one before an edge past `cached`: the next edge or
// the one after it, so chunks both end on an edge and straddle one. The next chunk starts
// where this one ends, so chunks also start on, one before and one after edges.
int pick_edge(ChoiceSource& c, const Aim& aim, int cached) {
  const std::array<int, 5> periods{aim.page_size, aim.window.value_or(aim.page_size),
                                   aim.edges.split_threshold, aim.edges.partition_keys,
                                   aim.edges.tile_keys};
  const int period = c.pick_from(periods);
  const int edge = (cached / period + 1 + c.pick_int(0, 1)) * period;
  return edge + pick_offset(c);
}

}  // namespace

int pick_chunk_length(ChoiceSource& c, const Aim& aim, int cached, int room) {
  enum class Length { short_chunk, to_edge, mid, whole };
  const Length kind = pick_weighted<Length>(
      c, {{Length::short_chunk, 3}, {Length::to_edge, 4}, {Length::mid, 2}, {Length::whole, 1}});
  const int short_chunk = c.pick_int(1, 4);
  const int to_edge = pick_edge(c, aim, cached) - cached;
  const int mid = c.pick_int(1, 16);
  const int whole = c.pick_int(1, std::max(1, room));
  return std::clamp(select(kind, {{Length::short_chunk, short_chunk},
                                  {Length::to_edge, to_edge},
                                  {Length::mid, mid},
                                  {Length::whole, whole}}),
                    1, std::max(1, room));
}

}  // namespace kvfuzz
