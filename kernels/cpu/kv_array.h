// A cache's K or V elements as the layout stores them: in its dtype (DTypeArray) or, with a
// quantized format (Layout::k_format, v_format; kvfuzz/kv_format.h), as that format's
// bytes, one encoded row per (token, kv head). Quantized, every offset and length is a
// whole number of rows (the row of one kv head of one token: head_dim or value_dim), and
// a row's kv head is its index modulo kv_heads, as both stores lay them out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/dtype_array.h"
#include "kvfuzz/kv_format.h"

namespace kvfuzz::cpu {

class KvArray {
 public:
  // How a quantized row is read back: decode_row unless a mutant reads it its own way.
  using RowDecoder = void (*)(const KvFormat& format, int kv_head, const uint8_t* in, int n,
                              float* out);

  KvArray(DType dtype, const KvFormat& format, int row, int kv_heads);

  DType dtype() const { return dtype_; }
  size_t size() const;
  void clear();
  void assign(size_t n, float value);           // n copies of value (a poison value)
  void fill(size_t at, size_t n, float value);  // overwrite [at, at + n) with it
  void append(const float* src, size_t n);      // round to the dtype, encode, append
  void write(size_t at, const float* src, size_t n);
  // Copy the stored elements [from, from + n) to [to, to + n) bit for bit; no overlap.
  void copy_within(size_t from, size_t to, size_t n);
  void truncate(size_t n);                           // keep the first n elements
  void read(size_t at, float* dst, size_t n) const;  // decode [at, at + n)
  // sum_i x[i] * element[at + i], accumulated in float in index order.
  float dot(size_t at, const float* x, size_t n) const;
  // acc[i] += w * element[at + i]
  void add_scaled(size_t at, float w, float* acc, size_t n) const;

  void set_decoder(RowDecoder decoder) { decoder_ = decoder; }

 private:
  bool quantized() const { return format_.quantized(); }
  size_t rows(size_t elements) const { return elements / row_; }
  int head_of(size_t row) const { return static_cast<int>(row % kv_heads_); }
  // One row of `value` (a poison) in the format's bytes: fp8 codes of value / scale; a
  // block's scale (and minimum) set to value's f16, its quants to 7; an affine group's scale
  // and bias set to value (its quants nonzero), so that a NaN or an infinity reaches every
  // element and a huge value stays huge.
  void poison_row(float value, int kv_head, uint8_t* out) const;
  void poison_rows(float value, size_t first, size_t count);  // rows [first, first + count)
  void encode(size_t row, const float* src);

  DType dtype_;
  KvFormat format_;
  size_t row_, kv_heads_, row_bytes_;
  DTypeArray plain_;            // unquantized
  std::vector<uint8_t> bytes_;  // quantized: rows of row_bytes_
  RowDecoder decoder_ = &decode_row;
};

}  // namespace kvfuzz::cpu
