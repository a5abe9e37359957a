#include "cpu/paged_engine.h"

namespace kvfuzz::cpu {

int64_t PagedEngine::decode_read_last(int /*seq*/, KeyRange keys) const {
  return keys.hi;
}

void PagedEngine::attend(const Query& query, int kv_head, KeyRange keys, float* out) {
  if (query.chunk_tokens == 1) keys.hi = decode_read_last(query.seq, keys);
  const PagedKvStore& store = kv();
  const auto key_at = [&](int64_t j) {
    return KvOffsets{store.k_offset(query.seq, j, kv_head), store.v_offset(query.seq, j, kv_head)};
  };
  const KvArrays arrays{store.keys(), store.values(), static_cast<size_t>(layout().head_dim),
                        static_cast<size_t>(layout().value_dim)};
  single_pass_attention(query.q, keys, scale(), arrays, key_at, arithmetic(), logit_features(query),
                        scratch_, out);
}

}  // namespace kvfuzz::cpu
