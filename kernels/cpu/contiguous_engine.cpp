#include "cpu/contiguous_engine.h"

#include <string>

namespace kvfuzz::cpu {

ContiguousEngine::ContiguousEngine(const EngineConfig& config) : CpuEngine(config) {
  seqs_.reserve(static_cast<size_t>(sequences()));
  for (int s = 0; s < sequences(); ++s) {
    const Layout& l = layout();
    seqs_.push_back(Sequence{KvArray(l.dtype, l.k_format, l.head_dim, l.kv_heads),
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
  s.k.append(k, static_cast<size_t>(layout().kv_heads) * static_cast<size_t>(layout().head_dim));
  // MLA caches the latent once, in K's row and format: the value is read from there.
  if (!layout().value_from_key) {
    s.v.append(v, static_cast<size_t>(layout().kv_heads) * static_cast<size_t>(layout().value_dim));
  }
  ++s.position;
  return s.tokens++;
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
