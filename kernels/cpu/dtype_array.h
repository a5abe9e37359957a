// K/V elements held in the layout's storage dtype: f32 as float, f16 and bf16 as their
// 16-bit encodings made by dtype.h's software conversions. Writing rounds to the dtype;
// reading decodes to float. dot() and add_scaled() read without a decoded copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::cpu {

// The float a poison kind stands for in `dtype` (huge = the dtype's largest finite value).
float poison_value(Poison poison, DType dtype);

class DTypeArray {
 public:
  explicit DTypeArray(DType dtype) : dtype_(dtype) {}

  DType dtype() const { return dtype_; }
  size_t size() const { return dtype_ == DType::f32 ? f32_.size() : bits_.size(); }

  void clear();
  void assign(size_t n, float value);           // n copies of value
  void fill(size_t at, size_t n, float value);  // overwrite [at, at + n)
  void append(const float* src, size_t n);      // encode and append
  void write(size_t at, const float* src, size_t n);
  // Copy the stored elements [from, from + n) to [to, to + n) bit for bit (no re-rounding).
  // The two ranges must not overlap.
  void copy_within(size_t from, size_t to, size_t n);
  // Keep the first n elements (n <= size()).
  void truncate(size_t n);
  void read(size_t at, float* dst, size_t n) const;  // decode [at, at + n)

  // sum_i x[i] * element[at + i], accumulated in float in index order.
  float dot(size_t at, const float* x, size_t n) const;
  // acc[i] += w * element[at + i]
  void add_scaled(size_t at, float w, float* acc, size_t n) const;

 private:
  uint16_t encode(float value) const {
    return dtype_ == DType::f16 ? f32_to_f16(value) : f32_to_bf16(value);
  }
  float decode(uint16_t bits) const {
    return dtype_ == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
  }

  DType dtype_;
  std::vector<float> f32_;      // dtype f32
  std::vector<uint16_t> bits_;  // dtype f16 / bf16
};

}  // namespace kvfuzz::cpu
