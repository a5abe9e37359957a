// Materialised token data: per token id, q for every q head, k and v for every kv head,
// already rounded to the layout's storage dtype (what the engine and reference both see).
#pragma once

#include <span>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz {

class TokenTable {
 public:
  TokenTable(const TokenSource& source, const Layout& layout);

  int count() const { return count_; }
  // [q_heads][head_dim], [kv_heads][head_dim], [kv_heads][value_dim], row-major.
  std::span<const float> q(int token) const { return slice(q_, token, q_stride_); }
  std::span<const float> k(int token) const { return slice(k_, token, k_stride_); }
  std::span<const float> v(int token) const { return slice(v_, token, v_stride_); }
  // K and V as a cache in the layout's k_format and v_format reads them back (the same as
  // k() and v() when unquantized). Keys under RoPE are quantized after their rotation,
  // which the reference does itself (judge/reference.cpp).
  std::span<const float> k_stored(int token) const {
    return slice(k_stored_.empty() ? k_ : k_stored_, token, k_stride_);
  }
  std::span<const float> v_stored(int token) const {
    return slice(v_stored_.empty() ? v_ : v_stored_, token, v_stride_);
  }

 private:
  // stored = every row of `row` elements of `data` (kv_heads rows per token) as `format`
  // reads it back; left empty when the format is unquantized.
  static void store_quantized(const KvFormat& format, DType dtype, int row, int kv_heads,
                              const std::vector<float>& data, std::vector<float>& stored);
  static std::span<const float> slice(const std::vector<float>& data, int token, size_t stride) {
    return std::span<const float>(data).subspan(static_cast<size_t>(token) * stride, stride);
  }
  int count_ = 0;
  size_t q_stride_ = 0, k_stride_ = 0, v_stride_ = 0;
  std::vector<float> q_, k_, v_;
  std::vector<float> k_stored_, v_stored_;  // empty when the format is unquantized
};

}  // namespace kvfuzz
