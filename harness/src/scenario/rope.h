// RoPE in double precision, as Layout::rope_theta defines it: the one rotation both
// references (attention and model level) apply to q and k at their absolute positions.
#pragma once

#include <cstddef>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz {

// The rotation of one head vector in place: pair i < shape.pairs() (RopeShape::pair) turns
// by pos * theta^(-2i / shape.dims); the elements before shape.offset() stay. validate()
// requires an even number of turned elements.
void rope_rotate(double* x, const RopeShape& shape, double theta, double pos);

// The cos and sin of every pair's angle at positions 0, 1, ..., computed once (the same
// bits as rope_rotate computes them each time): the model level's reference rotates every
// head of every layer at every position, nine passes a check. Half-split pairs over the
// whole head: validate() refuses interleaved RoPE and a RoPE part in a model scenario.
class RopeTable {
 public:
  RopeTable(size_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}
  // rope_rotate(x, {head_dim, head_dim, half_split}, theta, pos), from the table (grown to
  // pos as needed).
  void rotate(double* x, size_t pos);

 private:
  size_t head_dim_;
  double theta_;
  std::vector<double> cos_sin_;  // [pos][pair][cos, sin]
};

}  // namespace kvfuzz
