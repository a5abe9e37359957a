#include "cpu/dtype_array.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <limits>

namespace kvfuzz::cpu {

float poison_value(Poison poison, DType dtype) {
  switch (poison) {
    case Poison::nan:
      return std::numeric_limits<float>::quiet_NaN();
    case Poison::pos_inf:
      return std::numeric_limits<float>::infinity();
    case Poison::neg_inf:
      return -std::numeric_limits<float>::infinity();
    case Poison::huge:
      return max_finite(dtype);
  }
  return std::numeric_limits<float>::quiet_NaN();
}

void DTypeArray::clear() {
  f32_.clear();
  bits_.clear();
}

void DTypeArray::assign(size_t n, float value) {
  if (dtype_ == DType::f32) {
    f32_.assign(n, value);
  } else {
    bits_.assign(n, encode(value));
  }
}

void DTypeArray::fill(size_t at, size_t n, float value) {
  assert(at + n <= size());
  if (dtype_ == DType::f32) {
    for (size_t i = 0; i < n; ++i) f32_[at + i] = value;
  } else {
    const uint16_t bits = encode(value);
    for (size_t i = 0; i < n; ++i) bits_[at + i] = bits;
  }
}

void DTypeArray::append(const float* src, size_t n) {
  if (dtype_ == DType::f32) {
    f32_.insert(f32_.end(), src, src + n);
  } else {
    for (size_t i = 0; i < n; ++i) bits_.push_back(encode(src[i]));
  }
}

void DTypeArray::write(size_t at, const float* src, size_t n) {
  assert(at + n <= size());
  if (dtype_ == DType::f32) {
    for (size_t i = 0; i < n; ++i) f32_[at + i] = src[i];
  } else {
    for (size_t i = 0; i < n; ++i) bits_[at + i] = encode(src[i]);
  }
}

void DTypeArray::copy_within(size_t from, size_t to, size_t n) {
  assert(from + n <= size() && to + n <= size());
  assert(from + n <= to || to + n <= from);
  if (dtype_ == DType::f32) {
    std::copy_n(f32_.begin() + static_cast<std::ptrdiff_t>(from), n,
                f32_.begin() + static_cast<std::ptrdiff_t>(to));
  } else {
    std::copy_n(bits_.begin() + static_cast<std::ptrdiff_t>(from), n,
                bits_.begin() + static_cast<std::ptrdiff_t>(to));
  }
}

void DTypeArray::truncate(size_t n) {
  assert(n <= size());
  if (dtype_ == DType::f32) {
    f32_.resize(n);
  } else {
    bits_.resize(n);
  }
}

void DTypeArray::read(size_t at, float* dst, size_t n) const {
  assert(at + n <= size());
  if (dtype_ == DType::f32) {
    for (size_t i = 0; i < n; ++i) dst[i] = f32_[at + i];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = decode(bits_[at + i]);
  }
}

float DTypeArray::dot(size_t at, const float* x, size_t n) const {
  assert(at + n <= size());
  float sum = 0;
  if (dtype_ == DType::f32) {
    for (size_t i = 0; i < n; ++i) sum += x[i] * f32_[at + i];
  } else {
    for (size_t i = 0; i < n; ++i) sum += x[i] * decode(bits_[at + i]);
  }
  return sum;
}

void DTypeArray::add_scaled(size_t at, float w, float* acc, size_t n) const {
  assert(at + n <= size());
  if (dtype_ == DType::f32) {
    for (size_t i = 0; i < n; ++i) acc[i] += w * f32_[at + i];
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] += w * decode(bits_[at + i]);
  }
}

}  // namespace kvfuzz::cpu
