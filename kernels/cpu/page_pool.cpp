#include "cpu/page_pool.h"

#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/limits.h"

namespace kvfuzz::cpu {

PagedKvStore::PagedKvStore(const Layout& layout, int sequences, std::span<const int> page_order,
                           Poison poison)
    : page_size_(layout.page_size),
      kv_heads_(static_cast<size_t>(layout.kv_heads)),
      head_dim_(static_cast<size_t>(layout.head_dim)),
      value_dim_(static_cast<size_t>(layout.value_dim)),
      pool_pages_(static_cast<int>(page_order.size())),
      poison_(poison_value(poison, layout.dtype)),
      k_(layout.dtype),
      v_(layout.dtype),
      seqs_(static_cast<size_t>(sequences)) {
  std::vector<char> seen(page_order.size(), 0);
  for (int page : page_order) {
    if (page < 0 || page >= pool_pages_ || seen[static_cast<size_t>(page)]) {
      throw EngineError("page_order is not a permutation of 0.." + std::to_string(pool_pages_ - 1) +
                        " (bad or repeated page " + std::to_string(page) + ")");
    }
    seen[static_cast<size_t>(page)] = 1;
  }
  // The same bound validate() puts on scenarios: a larger pool is refused with an
  // EngineError instead of an allocation of gigabytes.
  const int64_t slots = int64_t{pool_pages_} * page_size_ * static_cast<int64_t>(kv_heads_);
  const auto per_slot = static_cast<int64_t>(head_dim_ + value_dim_);
  if (slots > limits::kMaxPoolElements / per_slot) {
    throw EngineError("page pool too large: " + std::to_string(pool_pages_) + " pages of " +
                      std::to_string(page_size_) + " slots x " + std::to_string(kv_heads_) +
                      " kv heads x " + std::to_string(per_slot) +
                      " (head_dim + value_dim) exceed " + std::to_string(limits::kMaxPoolElements) +
                      " K and V elements");
  }
  k_.assign(static_cast<size_t>(slots) * head_dim_, poison_);
  v_.assign(static_cast<size_t>(slots) * value_dim_, poison_);
  free_.assign(page_order.rbegin(), page_order.rend());
}

int64_t PagedKvStore::capacity(int seq) const {
  return static_cast<int64_t>(seqs_[static_cast<size_t>(seq)].pages.size()) * page_size_;
}

void PagedKvStore::reserve(int seq, int64_t more) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  const int64_t needed_pages = (s.length + more + page_size_ - 1) / page_size_;
  const int64_t missing = needed_pages - static_cast<int64_t>(s.pages.size());
  if (missing <= 0) return;
  if (missing > static_cast<int64_t>(free_.size())) {
    throw EngineError("page pool exhausted: sequence " + std::to_string(seq) + " needs " +
                      std::to_string(missing) + " more page(s) for " + std::to_string(more) +
                      " token(s), " + std::to_string(free_.size()) + " of " +
                      std::to_string(pool_pages_) + " pages free");
  }
  for (int64_t i = 0; i < missing; ++i) {
    s.pages.push_back(free_.back());
    free_.pop_back();
  }
}

int64_t PagedKvStore::append(int seq, const float* k, const float* v) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (s.length >= capacity(seq)) reserve(seq, 1);  // callers reserve; this is a safety net
  const int64_t pos = s.length;
  k_.write(k_offset(seq, pos, 0), k, kv_heads_ * head_dim_);
  v_.write(v_offset(seq, pos, 0), v, kv_heads_ * value_dim_);
  ++s.length;
  return pos;
}

void PagedKvStore::poison_page(int page) {
  const size_t first_slot = static_cast<size_t>(page) * static_cast<size_t>(page_size_);
  const size_t slots = static_cast<size_t>(page_size_) * kv_heads_;
  k_.fill(first_slot * kv_heads_ * head_dim_, slots * head_dim_, poison_);
  v_.fill(first_slot * kv_heads_ * value_dim_, slots * value_dim_, poison_);
}

void PagedKvStore::release(int seq) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  // Push in reverse so the sequence's first page is back on top: reused first.
  for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) {
    poison_page(*it);
    free_.push_back(*it);
  }
  s.pages.clear();
  s.length = 0;
}

}  // namespace kvfuzz::cpu
