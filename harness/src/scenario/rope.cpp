#include "scenario/rope.h"

#include <cmath>

namespace kvfuzz {

void rope_rotate(double* x, size_t head_dim, double theta, double pos) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = pos * inv_freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

}  // namespace kvfuzz
