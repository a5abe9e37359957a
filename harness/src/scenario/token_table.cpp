#include "kvfuzz/token_table.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kvfuzz/prng.h"

namespace kvfuzz {

namespace {

// q and k under `wide` use the dyadic mapping: wide scores (up to 2^26 per product) would
// make softmax an argmax whose winner f32 rounding may flip, so no tolerance could judge
// the row. The wide dynamic range goes into v, where it tests the tolerance's M term.
enum class Role { q, k, v };

float generated_value(Xoshiro256& rng, Distribution distribution, Role role) {
  const uint64_t bits = rng.next();
  if (distribution == Distribution::wide && role != Role::v) return dyadic_from_bits(bits);
  switch (distribution) {
    case Distribution::small_int:
      return small_int_from_bits(bits);
    case Distribution::dyadic:
      return dyadic_from_bits(bits);
    case Distribution::uniform:
      return uniform_from_bits(bits);
    case Distribution::wide:
      return wide_from_bits(bits);
  }
  return 0;
}

void append_explicit(std::vector<float>& out, const std::vector<std::vector<double>>& heads) {
  for (const auto& head : heads) {
    for (double x : head) out.push_back(static_cast<float>(x));
  }
}

}  // namespace

TokenTable::TokenTable(const TokenSource& source, const Layout& layout)
    : count_(token_count(source)),
      q_stride_(static_cast<size_t>(layout.q_heads) * layout.head_dim),
      k_stride_(static_cast<size_t>(layout.kv_heads) * layout.head_dim),
      v_stride_(static_cast<size_t>(layout.kv_heads) * layout.value_dim) {
  q_.reserve(q_stride_ * count_);
  k_.reserve(k_stride_ * count_);
  v_.reserve(v_stride_ * count_);
  if (const auto* tokens = std::get_if<std::vector<ExplicitToken>>(&source)) {
    for (const ExplicitToken& token : *tokens) {
      append_explicit(q_, token.q);
      append_explicit(k_, token.k);
      append_explicit(v_, token.v);
    }
  } else {
    // Fixed draw order, token by token: q, then k, then v. Changing it changes every
    // generated fixture, so it is part of the fixture format.
    const auto& generated = std::get<GeneratedTokens>(source);
    Xoshiro256 rng(generated.seed);
    for (int t = 0; t < count_; ++t) {
      const Distribution d = generated.distribution;
      for (size_t i = 0; i < q_stride_; ++i) q_.push_back(generated_value(rng, d, Role::q));
      for (size_t i = 0; i < k_stride_; ++i) k_.push_back(generated_value(rng, d, Role::k));
      for (size_t i = 0; i < v_stride_; ++i) v_.push_back(generated_value(rng, d, Role::v));
    }
    if (generated.zero_scores) {
      std::fill(q_.begin(), q_.end(), 0.0f);
      std::fill(k_.begin(), k_.end(), 0.0f);
    }
    // A power of two: exact, and it commutes with the rounding to dtype below.
    const float magnitude = std::ldexp(1.0f, generated.qk_log2);
    for (auto* data : {&q_, &k_}) {
      for (float& x : *data) x *= magnitude;
    }
  }
  for (auto* data : {&q_, &k_, &v_}) {
    for (float& x : *data) x = round_to_dtype(x, layout.dtype);
  }
  store_quantized(layout.k_format, layout.dtype, layout.head_dim, layout.kv_heads, k_, k_stored_);
  // MLA: each value is its key's first value_dim elements as the key's cache reads them back
  // (explicit tokens carry no v; the generated ones still draw theirs, so the draw order
  // stays one for every layout). Over a quantized key cache that is the stored latent,
  // through K's format and scale: fp8 is elementwise, and a block or group format's value is
  // whole blocks (validate.cpp), so the RoPE part, in blocks of its own, does not touch it.
  // The chunks an engine is given carry these values too.
  if (layout.value_from_key) {
    const std::vector<float>& keys = k_stored_.empty() ? k_ : k_stored_;
    v_.resize(v_stride_ * static_cast<size_t>(count_));
    const auto hd = static_cast<size_t>(layout.head_dim);
    const auto vd = static_cast<size_t>(layout.value_dim);
    for (size_t row = 0; row * vd < v_.size(); ++row) {
      std::copy_n(keys.begin() + static_cast<std::ptrdiff_t>(row * hd), vd,
                  v_.begin() + static_cast<std::ptrdiff_t>(row * vd));
    }
  }
  store_quantized(layout.v_format, layout.dtype, layout.value_dim, layout.kv_heads, v_, v_stored_);
}

void TokenTable::store_quantized(const KvFormat& format, DType dtype, int row, int kv_heads,
                                 const std::vector<float>& data, std::vector<float>& stored) {
  // A per-channel format stores rows as given until their group is whole (kv_format.h):
  // which group, and when, is the stream's (judge/reference.cpp), not the token's.
  if (!format.quantized() || is_channel(format.quant)) return;
  stored.resize(data.size());
  const auto n = static_cast<size_t>(row);
  for (size_t r = 0; (r + 1) * n <= data.size(); ++r) {
    const int kv_head = static_cast<int>(r % static_cast<size_t>(kv_heads));
    round_trip_row(format, dtype, kv_head, data.data() + r * n, row, stored.data() + r * n);
  }
}

}  // namespace kvfuzz
