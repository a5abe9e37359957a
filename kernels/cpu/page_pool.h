// Paged K/V storage shared by the paged and flash engines: a fixed pool of physical pages
// (page_size slots each, K and V of every kv head), a block table per sequence, and a free
// list that hands pages out in the configured page order.
//
// Every slot of the pool starts out holding the poison. Pages released by a reset are
// poisoned again and go to the FRONT of the free list, so they are the next ones reused.
// Element layout: K [page][slot][kv_head][head_dim], V [page][slot][kv_head][value_dim].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cpu/dtype_array.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz::cpu {

class PagedKvStore {
 public:
  // Throws EngineError unless page_order is a permutation of 0..page_order.size()-1.
  PagedKvStore(const Layout& layout, int sequences, std::span<const int> page_order, Poison poison);

  int64_t length(int seq) const { return seqs_[static_cast<size_t>(seq)].length; }
  // Slots in the sequence's pages (a multiple of page_size, >= length).
  int64_t capacity(int seq) const;
  int free_pages() const { return static_cast<int>(free_.size()); }
  int pool_pages() const { return pool_pages_; }

  // Take pages from the free list until `more` further tokens fit; throws EngineError
  // (and takes nothing) when the pool cannot hold them.
  void reserve(int seq, int64_t more);
  // Write one token's k and v at slot length(seq), which must be reserved; returns its
  // position.
  int64_t append(int seq, const float* k, const float* v);
  // Poison the sequence's pages, return them to the front of the free list, length 0.
  void release(int seq);

  // Element offsets of slot `pos` (< capacity(seq)) of `seq` for one kv head.
  size_t k_offset(int seq, int64_t pos, int kv_head) const {
    return (slot(seq, pos) * kv_heads_ + static_cast<size_t>(kv_head)) * head_dim_;
  }
  size_t v_offset(int seq, int64_t pos, int kv_head) const {
    return (slot(seq, pos) * kv_heads_ + static_cast<size_t>(kv_head)) * value_dim_;
  }
  const DTypeArray& keys() const { return k_; }
  const DTypeArray& values() const { return v_; }

 private:
  struct Sequence {
    std::vector<int> pages;  // block table: logical page -> physical page
    int64_t length = 0;
  };
  // Physical slot (page * page_size + slot in page) of position pos of seq.
  size_t slot(int seq, int64_t pos) const {
    const auto& pages = seqs_[static_cast<size_t>(seq)].pages;
    const size_t page = static_cast<size_t>(pages[static_cast<size_t>(pos / page_size_)]);
    return page * static_cast<size_t>(page_size_) + static_cast<size_t>(pos % page_size_);
  }
  void poison_page(int page);

  int64_t page_size_;
  size_t kv_heads_, head_dim_, value_dim_;
  int pool_pages_;
  float poison_;
  DTypeArray k_, v_;
  std::vector<Sequence> seqs_;
  std::vector<int> free_;  // the back is the front of the free list: the next page handed out
};

}  // namespace kvfuzz::cpu
