// RoPE in double precision, as Layout::rope_theta defines it: the one rotation both
// references (attention and model level) apply to q and k at their absolute positions.
#pragma once

#include <cstddef>
#include <vector>

namespace kvfuzz {

// NeoX (half-split) rotation of one head vector in place: pairs (x_i, x_{i+d/2}) for
// i < d/2 turn by pos * theta^(-2i/d). validate() requires an even head_dim with RoPE.
void rope_rotate(double* x, size_t head_dim, double theta, double pos);

// The cos and sin of every pair's angle at positions 0, 1, ..., computed once (the same
// bits as rope_rotate computes them each time): the model level's reference rotates every
// head of every layer at every position, nine passes a check.
class RopeTable {
 public:
  RopeTable(size_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}
  // rope_rotate(x, head_dim, theta, pos), from the table (grown to pos as needed).
  void rotate(double* x, size_t pos);

 private:
  size_t head_dim_;
  double theta_;
  std::vector<double> cos_sin_;  // [pos][pair][cos, sin]
};

}  // namespace kvfuzz
