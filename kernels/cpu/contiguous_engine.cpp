#include "cpu/contiguous_engine.h"

#include <string>

#include "kvfuzz/dtype.h"
#include "kvfuzz/kv_format.h"

namespace kvfuzz::cpu {

ContiguousEngine::ContiguousEngine(const EngineConfig& config) : CpuEngine(config) {
  seqs_.reserve(static_cast<size_t>(sequences()));
  const Layout& l = layout();
  // Keys quantized by channel are held in f32: a group's read-back values are not the dtype's.
  const bool channel = is_channel(l.k_format.quant);
  for (int s = 0; s < sequences(); ++s) {
    seqs_.push_back(Sequence{KvArray(channel ? DType::f32 : l.dtype,
                                     channel ? KvFormat{} : l.k_format, l.head_dim, l.kv_heads),
                             KvArray(l.dtype, l.v_format, l.value_dim, l.kv_heads), 0, 0});
  }
}

void ContiguousEngine::reset(int seq) {
  check_seq(seq, "reset");
  clear_kv(seq);
  clear_position(seq);
}

void ContiguousEngine::truncate(int seq, int64_t keep) {
  check_seq(seq, "truncate");
  shrink_kv(seq, keep);
  set_position(seq, keep);
}

void ContiguousEngine::fork(int src, int dst) {
  check_seq(src, "fork");
  check_seq(dst, "fork");
  if (src == dst) throw EngineError("fork: source and destination are both " + std::to_string(src));
  seqs_[static_cast<size_t>(dst)] = seqs_[static_cast<size_t>(src)];
}

void ContiguousEngine::shrink_kv(int seq, int64_t keep) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (keep < 0 || keep > s.tokens) {
    throw EngineError("truncate: sequence " + std::to_string(seq) + " holds " +
                      std::to_string(s.tokens) + " token(s), cannot keep " + std::to_string(keep));
  }
  const auto n = static_cast<size_t>(keep) * static_cast<size_t>(layout().kv_heads);
  s.k.truncate(n * static_cast<size_t>(layout().head_dim));
  if (!layout().value_from_key) s.v.truncate(n * static_cast<size_t>(layout().value_dim));
  s.tokens = keep;
}

void ContiguousEngine::set_position(int seq, int64_t position) {
  seqs_[static_cast<size_t>(seq)].position = position;
}

void ContiguousEngine::clear_kv(int seq) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  s.k.clear();
  s.v.clear();
  s.tokens = 0;
}

void ContiguousEngine::clear_position(int seq) {
  seqs_[static_cast<size_t>(seq)].position = 0;
}

void ContiguousEngine::begin_chunk(int /*seq*/, int /*tokens*/) {}

int64_t ContiguousEngine::next_position(int seq) const {
  return seqs_[static_cast<size_t>(seq)].position;
}

int64_t ContiguousEngine::store(int seq, const float* k, const float* v) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  const size_t row =
      static_cast<size_t>(layout().kv_heads) * static_cast<size_t>(layout().head_dim);
  if (is_channel(layout().k_format.quant)) {
    key_.resize(row);
    for (size_t i = 0; i < row; ++i) key_[i] = round_to_dtype(k[i], layout().dtype);
    s.k.append(key_.data(), row);
  } else {
    s.k.append(k, row);
  }
  // MLA caches the latent once, in K's row and format: the value is read from there.
  if (!layout().value_from_key) {
    s.v.append(v, static_cast<size_t>(layout().kv_heads) * static_cast<size_t>(layout().value_dim));
  }
  ++s.position;
  const int64_t index = s.tokens++;
  if (is_channel(layout().k_format.quant) && makes_group_whole(s.tokens)) quantize_last_group(s);
  return index;
}

bool ContiguousEngine::makes_group_whole(int64_t entries) const {
  return entries % layout().k_format.group == 0;
}

void ContiguousEngine::quantize_keys(float* keys, int count, int n) const {
  quantize_group(layout().k_format.quant, keys, count, n, keys);
}

void ContiguousEngine::quantize_last_group(Sequence& s) {
  const auto heads = static_cast<size_t>(layout().kv_heads);
  const auto hd = static_cast<size_t>(layout().head_dim);
  const int group = layout().k_format.group;
  const auto first = static_cast<size_t>(s.tokens - group);
  group_.resize(static_cast<size_t>(group) * hd);
  for (size_t g = 0; g < heads; ++g) {
    for (size_t i = 0; i < static_cast<size_t>(group); ++i) {
      s.k.read(((first + i) * heads + g) * hd, group_.data() + i * hd, hd);
    }
    quantize_keys(group_.data(), group, static_cast<int>(hd));
    for (size_t i = 0; i < static_cast<size_t>(group); ++i) {
      s.k.write(((first + i) * heads + g) * hd, group_.data() + i * hd, hd);
    }
  }
}

void ContiguousEngine::attend(const Query& query, int kv_head, KeyRange keys, float* out) {
  const Sequence& s = seqs_[static_cast<size_t>(query.seq)];
  const size_t heads = static_cast<size_t>(layout().kv_heads);
  const size_t hd = static_cast<size_t>(layout().head_dim);
  const size_t vd = static_cast<size_t>(layout().value_dim);
  const size_t g = static_cast<size_t>(kv_head);
  // Under MLA the value is the first value_dim elements of its key's stored row (as an MLA
  // kernel reads its latent cache: over a block format, whole blocks read back in f32).
  const bool latent = layout().value_from_key;
  const auto key_at = [&](int64_t j) {
    const size_t row = static_cast<size_t>(j) * heads + g;
    return KvOffsets{row * hd, row * (latent ? hd : vd)};
  };
  single_pass_attention(query.q, keys, scale(), KvArrays{s.k, latent ? s.k : s.v, hd, vd}, key_at,
                        arithmetic(), logit_features(query), scratch_, out);
}

}  // namespace kvfuzz::cpu
