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

 private:
  static std::span<const float> slice(const std::vector<float>& data, int token, size_t stride) {
    return std::span<const float>(data).subspan(static_cast<size_t>(token) * stride, stride);
  }
  int count_ = 0;
  size_t q_stride_ = 0, k_stride_ = 0, v_stride_ = 0;
  std::vector<float> q_, k_, v_;
};

}  // namespace kvfuzz
