#include "scenario/rope.h"

#include <cmath>

namespace kvfuzz {

namespace {

// Pair i's angle at pos: pos * theta^(-2i/d), d the number of turned elements.
double rope_angle(size_t i, size_t dims, double theta, double pos) {
  const double inv_freq =
      std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dims));
  return pos * inv_freq;
}

// A pair of x turned by the angle whose cos and sin are c and s.
void turn_pair(double* x, RopePair pair, double c, double s) {
  const double a = x[pair.first], b = x[pair.second];
  x[pair.first] = a * c - b * s;
  x[pair.second] = a * s + b * c;
}

}  // namespace

void rope_rotate(double* x, const RopeShape& shape, double theta, double pos) {
  for (size_t i = 0; i < shape.pairs(); ++i) {
    const double angle = rope_angle(i, shape.dims, theta, pos);
    turn_pair(x, shape.pair(i), std::cos(angle), std::sin(angle));
  }
}

void RopeTable::rotate(double* x, size_t pos) {
  const size_t half = head_dim_ / 2;
  while (cos_sin_.size() < (pos + 1) * half * 2) {
    const size_t at = cos_sin_.size() / (half * 2);
    for (size_t i = 0; i < half; ++i) {
      const double angle = rope_angle(i, head_dim_, theta_, static_cast<double>(at));
      cos_sin_.push_back(std::cos(angle));
      cos_sin_.push_back(std::sin(angle));
    }
  }
  const double* cs = cos_sin_.data() + pos * half * 2;
  const RopeShape whole{head_dim_, head_dim_, RopeStyle::half_split};
  for (size_t i = 0; i < half; ++i) {
    turn_pair(x, whole.pair(i), cs[2 * i], cs[2 * i + 1]);
  }
}

}  // namespace kvfuzz
