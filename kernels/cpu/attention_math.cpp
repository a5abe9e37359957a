#include "cpu/attention_math.h"

namespace kvfuzz::cpu {

void rope_angles(int dim, int64_t pos, double theta, float* cos_out, float* sin_out) {
  const int half = dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / dim);
    const double angle = static_cast<double>(pos) * inv_freq;
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void rope_apply(float* x, const RopeShape& shape, const float* cos_in, const float* sin_in) {
  for (size_t i = 0; i < shape.pairs(); ++i) {
    const RopePair pair = shape.pair(i);
    const float a = x[pair.first];
    const float b = x[pair.second];
    x[pair.first] = a * cos_in[i] - b * sin_in[i];
    x[pair.second] = a * sin_in[i] + b * cos_in[i];
  }
}

void rope_apply_in(float* x, const RopeShape& shape, const float* cos_in, const float* sin_in,
                   DType dtype) {
  const auto r = [dtype](float value) { return round_to_dtype(value, dtype); };
  for (size_t i = 0; i < shape.pairs(); ++i) {
    const RopePair pair = shape.pair(i);
    const float a = x[pair.first];
    const float b = x[pair.second];
    x[pair.first] = r(r(a * cos_in[i]) - r(b * sin_in[i]));
    x[pair.second] = r(r(a * sin_in[i]) + r(b * cos_in[i]));
  }
}

float dot(const float* a, const float* b, size_t n) {
  float sum = 0;
  for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace kvfuzz::cpu
