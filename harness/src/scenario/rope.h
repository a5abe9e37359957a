// RoPE in double precision, as Layout::rope_theta defines it: the one rotation both
// references (attention and model level) apply to q and k at their absolute positions.
#pragma once

#include <cstddef>

namespace kvfuzz {

// NeoX (half-split) rotation of one head vector in place: pairs (x_i, x_{i+d/2}) for
// i < d/2 turn by pos * theta^(-2i/d). validate() requires an even head_dim with RoPE.
void rope_rotate(double* x, size_t head_dim, double theta, double pos);

}  // namespace kvfuzz
