// Chunk lengths aimed at edges: the length of the next chunk of a sequence is short (and
// decodes) first, then one that ends on, one before or one after a page boundary, the
// window, the engine's split threshold, a partition or a tile (EngineEdges), a mid-size
// one, or the whole room left. The next chunk starts where one ends, so chunks also start
// at those edges: where paged, windowed and split kernels change what they do.
#pragma once

#include <optional>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/generator.h"

namespace kvfuzz {

// The edges chunks are aimed at, as periods in absolute position: page boundaries, the
// window (where it starts to slide), the engine's split threshold, partitions and tiles.
struct Aim {
  int page_size = 16;
  std::optional<int> window;
  EngineEdges edges;
};

// The length of the next chunk of a sequence holding `cached` tokens with `room` left:
// short chunks and decodes first, then chunks that end at an edge, mid-size chunks, and
// single large chunks up to the whole room. At least 1; at most room when room >= 1.
int pick_chunk_length(ChoiceSource& c, const Aim& aim, int cached, int room);

}  // namespace kvfuzz
