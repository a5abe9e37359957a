#include "cpu/page_pool.h"

namespace kvfuzz::cpu {

PagedKvStore::PagedKvStore(const Layout& layout, int sequences, std::span<const int> page_order,
                           Poison poison)
    : PageTable(layout, sequences, page_order),
      kv_heads_(static_cast<size_t>(layout.kv_heads)),
      head_dim_(static_cast<size_t>(layout.head_dim)),
      value_dim_(static_cast<size_t>(layout.value_dim)),
      latent_(layout.value_from_key),
      poison_(poison_value(poison, layout.dtype)),
      k_(layout.dtype, layout.k_format, layout.head_dim, layout.kv_heads),
      v_(layout.dtype, layout.v_format, layout.value_dim, layout.kv_heads) {
  const size_t slots =
      static_cast<size_t>(pool_pages()) * static_cast<size_t>(page_size()) * kv_heads_;
  k_.assign(slots * head_dim_, poison_);
  v_.assign(latent_ ? 0 : slots * value_dim_, poison_);
}

void PagedKvStore::copy_slots(int from, int to, int64_t slots) {
  const size_t ps = static_cast<size_t>(page_size());
  const size_t n = static_cast<size_t>(slots) * kv_heads_;
  const size_t a = static_cast<size_t>(from) * ps * kv_heads_;
  const size_t b = static_cast<size_t>(to) * ps * kv_heads_;
  k_.copy_within(a * head_dim_, b * head_dim_, n * head_dim_);
  if (!latent_) v_.copy_within(a * value_dim_, b * value_dim_, n * value_dim_);
}

void PagedKvStore::poison_slots(int page, int64_t from) {
  const size_t first_slot =
      static_cast<size_t>(page) * static_cast<size_t>(page_size()) + static_cast<size_t>(from);
  const size_t n = static_cast<size_t>(page_size() - from) * kv_heads_;
  k_.fill(first_slot * kv_heads_ * head_dim_, n * head_dim_, poison_);
  if (!latent_) v_.fill(first_slot * kv_heads_ * value_dim_, n * value_dim_, poison_);
}

int64_t PagedKvStore::append(int seq, const float* k, const float* v) {
  reserve(seq, 1);  // a no-op when the caller reserved: the slot's page is held, unshared
  const int64_t pos = length(seq);
  k_.write(k_offset(seq, pos, 0), k, kv_heads_ * head_dim_);
  if (!latent_) v_.write(v_offset(seq, pos, 0), v, kv_heads_ * value_dim_);
  grow(seq, 1);
  return pos;
}

}  // namespace kvfuzz::cpu
