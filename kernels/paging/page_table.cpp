#include "paging/page_table.h"

#include <algorithm>
#include <string>

#include "kvfuzz/engine.h"
#include "kvfuzz/limits.h"

namespace kvfuzz::paging {

PageTable::PageTable(const Layout& layout, int sequences, std::span<const int> page_order)
    : page_size_(layout.page_size),
      pool_pages_(static_cast<int>(page_order.size())),
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
  const int64_t slots = int64_t{pool_pages_} * page_size_ * layout.kv_heads;
  const int64_t per_slot = int64_t{layout.head_dim} + layout.value_dim;
  if (slots > limits::kMaxPoolElements / per_slot) {
    throw EngineError("page pool too large: " + std::to_string(pool_pages_) + " pages of " +
                      std::to_string(page_size_) + " slots x " + std::to_string(layout.kv_heads) +
                      " kv heads x " + std::to_string(per_slot) +
                      " (head_dim + value_dim) exceed " + std::to_string(limits::kMaxPoolElements) +
                      " K and V elements");
  }
  refs_.assign(static_cast<size_t>(pool_pages_), 0);
  free_.assign(page_order.rbegin(), page_order.rend());
}

int64_t PageTable::capacity(int seq) const {
  return static_cast<int64_t>(seqs_[static_cast<size_t>(seq)].pages.size()) * page_size_;
}

void PageTable::check_seq(int seq, const char* what) const {
  if (seq < 0 || static_cast<size_t>(seq) >= seqs_.size()) {
    throw EngineError(std::string(what) + ": sequence " + std::to_string(seq) +
                      " out of range (pool has " + std::to_string(seqs_.size()) + " sequences)");
  }
}

void PageTable::require_free(int64_t needed, int64_t will_free, int seq,
                             const std::string& what) const {
  const int64_t available = static_cast<int64_t>(free_.size()) + will_free;
  if (needed > available) {
    throw EngineError("page pool exhausted: sequence " + std::to_string(seq) + " needs " +
                      std::to_string(needed) + " page(s) for " + what + ", " +
                      std::to_string(available) + " of " + std::to_string(pool_pages_) +
                      " pages free");
  }
}

int PageTable::take_page() {
  const int page = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

void PageTable::drop_page(int page) {
  // A page already free stays free once: only the mutants' block tables hold free pages
  // (reset-keeps-block-table, fork-shares-partial-page), and dropping one of those again
  // must not list it twice.
  if (refs_[static_cast<size_t>(page)] <= 0) return;
  if (--refs_[static_cast<size_t>(page)] > 0) return;
  poison_slots(page, 0);
  free_.push_back(page);
}

void PageTable::copy_on_write(int seq, size_t index) {
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  const int old = s.pages[index];
  const int64_t valid =
      std::clamp<int64_t>(s.length - static_cast<int64_t>(index) * page_size_, 0, page_size_);
  const int fresh = take_page();  // poisoned: the slots past `valid` stay so
  copy_slots(old, fresh, valid);
  s.pages[index] = fresh;
  drop_page(old);  // shared, so it stays with the other holders
}

void PageTable::reserve(int seq, int64_t more) {
  check_seq(seq, "reserve");
  if (more < 0) throw EngineError("reserve: negative token count " + std::to_string(more));
  if (more == 0) return;
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  const auto first = static_cast<size_t>(s.length / page_size_);
  const auto end = static_cast<size_t>((s.length + more - 1) / page_size_ + 1);
  const size_t held = std::min(end, s.pages.size());
  int64_t copies = 0;
  for (size_t i = first; i < held; ++i) copies += refcount(s.pages[i]) > 1 ? 1 : 0;
  const int64_t missing = static_cast<int64_t>(end - held);  // held >= first: length fits
  if (copies + missing == 0) return;  // the common case: every append after a reserve
  require_free(copies + missing, 0, seq, std::to_string(more) + " more token(s)");
  for (size_t i = first; i < held; ++i) {
    if (refcount(s.pages[i]) > 1) copy_on_write(seq, i);
  }
  for (int64_t i = 0; i < missing; ++i) s.pages.push_back(take_page());
  ++generation_;
}

void PageTable::grow(int seq, int64_t more) {
  check_seq(seq, "grow");
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (more < 0 || s.length + more > capacity(seq)) {
    throw EngineError("grow: sequence " + std::to_string(seq) + " has room for " +
                      std::to_string(capacity(seq) - s.length) + " more token(s), not " +
                      std::to_string(more) + " (reserve first)");
  }
  s.length += more;
}

void PageTable::release(int seq, bool clear_block_table) {
  check_seq(seq, "release");
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  // Drop in reverse so that the sequence's first freed page ends on top: reused first.
  for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) drop_page(*it);
  if (clear_block_table) s.pages.clear();
  s.length = 0;
  ++generation_;
}

void PageTable::truncate(int seq, int64_t keep, bool copy_shared_page) {
  check_seq(seq, "truncate");
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (keep < 0 || keep > s.length) {
    throw EngineError("truncate: sequence " + std::to_string(seq) + " holds " +
                      std::to_string(s.length) + " token(s), cannot keep " + std::to_string(keep));
  }
  const auto kept_pages = static_cast<size_t>((keep + page_size_ - 1) / page_size_);
  const int64_t in_page = keep % page_size_;  // slots kept in the page holding keep - 1
  // That page's slots [in_page, ...) hold dropped tokens: poison them, in a copy if shared.
  const bool dirty_tail = in_page != 0 && keep < s.length;
  const bool copy = copy_shared_page && dirty_tail && refcount(s.pages[kept_pages - 1]) > 1;
  if (copy) {
    int64_t will_free = 0;
    for (size_t i = kept_pages; i < s.pages.size(); ++i) {
      will_free += refcount(s.pages[i]) == 1 ? 1 : 0;
    }
    require_free(1, will_free, seq, "a truncate (copy-on-write of a shared page)");
  }
  for (size_t i = s.pages.size(); i-- > kept_pages;) drop_page(s.pages[i]);
  s.pages.resize(kept_pages);
  s.length = keep;
  if (copy) {
    copy_on_write(seq, kept_pages - 1);  // copies the kept slots only
  } else if (dirty_tail) {
    poison_slots(s.pages[kept_pages - 1], in_page);
  }
  ++generation_;
}

void PageTable::fork(int src, int dst, bool copy_partial_page) {
  check_seq(src, "fork");
  check_seq(dst, "fork");
  if (src == dst) throw EngineError("fork: source and destination are both " + std::to_string(src));
  const Sequence& from = seqs_[static_cast<size_t>(src)];
  const auto full = static_cast<size_t>(from.length / page_size_);
  const int64_t partial = from.length % page_size_;
  if (partial != 0 && copy_partial_page) {
    int64_t will_free = 0;
    for (int page : seqs_[static_cast<size_t>(dst)].pages) will_free += refcount(page) == 1 ? 1 : 0;
    require_free(1, will_free, dst, "a fork of sequence " + std::to_string(src));
  }
  release(dst);
  Sequence& to = seqs_[static_cast<size_t>(dst)];
  for (size_t i = 0; i < full; ++i) {
    to.pages.push_back(from.pages[i]);
    ++refs_[static_cast<size_t>(from.pages[i])];
  }
  if (partial != 0 && !copy_partial_page) {
    to.pages.push_back(from.pages[full]);  // not counted: no copy-on-write will protect it
  } else if (partial != 0) {
    const int fresh = take_page();
    copy_slots(from.pages[full], fresh, partial);
    to.pages.push_back(fresh);
  }
  to.length = from.length;
  ++generation_;
}

void PageTable::rewind_without_poisoning(int seq, int64_t length) {
  check_seq(seq, "rewind");
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (length < 0 || length > s.length) {
    throw EngineError("rewind: sequence " + std::to_string(seq) + " holds " +
                      std::to_string(s.length) + " token(s), cannot rewind to " +
                      std::to_string(length));
  }
  s.length = length;
}

}  // namespace kvfuzz::paging
