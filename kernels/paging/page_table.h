// The bookkeeping of a paged K/V cache, apart from where its bytes live: a fixed pool of
// physical pages, a block table per sequence, a free list that hands pages out in the
// configured page order, and reference counts. The CPU engines' PagedKvStore keeps the
// pages in host arrays, the CUDA engines' DeviceKvPool in device memory; both derive from
// this class and implement its two storage hooks (copy_slots, poison_slots).
//
// Pages are reference counted: fork() lets two block tables share a page. A shared page is
// never written: before any write into it (an append, or the poisoning of its tail by a
// truncate) the writing sequence gets its own copy (copy-on-write) and the other sharers
// keep the original. In honest use only full pages are shared: fork() copies the source's
// partial last page instead of sharing it.
//
// Invariant (kept with the hooks): every slot outside every sequence's valid prefix holds
// the poison. The whole pool starts poisoned (the storage's job); a page whose count drops
// to 0 is poisoned again and goes to the FRONT of the free list, so it is the next one
// reused; a copy takes a poisoned free page and copies only the slots below the sequence's
// length; a truncate poisons the dropped slots of the page it keeps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz::paging {

class PageTable {
 public:
  // Throws EngineError unless page_order is a permutation of 0..page_order.size()-1, or when
  // the pool's K and V elements exceed limits::kMaxPoolElements.
  PageTable(const Layout& layout, int sequences, std::span<const int> page_order);
  virtual ~PageTable() = default;
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  int sequences() const { return static_cast<int>(seqs_.size()); }
  int64_t page_size() const { return page_size_; }
  int64_t length(int seq) const { return seqs_[static_cast<size_t>(seq)].length; }
  // Slots in the sequence's pages (a multiple of page_size, >= length).
  int64_t capacity(int seq) const;
  int free_pages() const { return static_cast<int>(free_.size()); }
  int pool_pages() const { return pool_pages_; }
  // The sequence's block table (logical page -> physical page) and a page's reference
  // count (the number of block tables holding it; 0 for a free page).
  std::span<const int> pages(int seq) const { return seqs_[static_cast<size_t>(seq)].pages; }
  int refcount(int page) const { return refs_[static_cast<size_t>(page)]; }
  // Bumped by every change to any block table: a mirror of the tables (a device copy) is
  // stale when its generation differs.
  uint64_t generation() const { return generation_; }

  // Make the next `more` tokens of `seq` writable: take pages from the free list until they
  // fit, and copy every shared page they would be written into. Throws EngineError (and
  // changes nothing) when the pool cannot supply the pages.
  void reserve(int seq, int64_t more);
  // The next `more` tokens of `seq` were written (into slots reserved before): its length
  // grows by `more`. Throws EngineError when they were not reserved.
  void grow(int seq, int64_t more);
  // Drop the sequence's pages (count - 1; a page no one holds any more is poisoned and put
  // at the front of the free list), length 0. clear_block_table = false drops them but
  // leaves them in the block table, so the sequence writes into pages the free list hands
  // out again: honest engines never pass it; the reset-keeps-block-table mutant does.
  void release(int seq, bool clear_block_table = true);
  // Keep the first `keep` tokens (0 <= keep <= length): pages wholly beyond them are
  // dropped as by release; the slots >= keep of the page holding keep - 1 are poisoned,
  // in a copy if that page is shared. Throws EngineError on a bad keep, or when a needed
  // copy finds no free page (then nothing changes). copy_shared_page = false poisons a
  // shared page in place, under the other sharers' feet: honest engines never pass it; the
  // truncate-shared-in-place mutant does.
  void truncate(int seq, int64_t keep, bool copy_shared_page = true);
  // `dst` drops its pages (as by release) and starts with src's tokens: it shares src's
  // full pages and gets a copy of src's partial last page (slots past the length stay
  // poisoned). Throws EngineError when src == dst, or when the copy finds no free page
  // (then nothing changes). copy_partial_page = false hands dst src's partial last page
  // itself, uncounted, so neither side copies it before writing its free slots: honest
  // engines never pass it; the fork-shares-partial-page mutant does.
  void fork(int src, int dst, bool copy_partial_page = true);
  // Sets the length (the position counter) of `seq` to `length` <= length(seq) WITHOUT
  // dropping or poisoning anything: the slots in [length, old length) keep their tokens.
  // Honest engines never call it (truncate is the honest rollback); a mutant does.
  void rewind_without_poisoning(int seq, int64_t length);

  // Physical slot (page * page_size + slot in page) of position pos (< capacity) of seq.
  size_t slot(int seq, int64_t pos) const {
    const auto& pages = seqs_[static_cast<size_t>(seq)].pages;
    const size_t page = static_cast<size_t>(pages[static_cast<size_t>(pos / page_size_)]);
    return page * static_cast<size_t>(page_size_) + static_cast<size_t>(pos % page_size_);
  }

 protected:
  // --- storage, implemented by every pool ---
  // Copy slots [0, slots) of physical page `from` to physical page `to`, bit for bit.
  virtual void copy_slots(int from, int to, int64_t slots) = 0;
  // Poison slots [from, page_size) of physical page `page`.
  virtual void poison_slots(int page, int64_t from) = 0;

  void check_seq(int seq, const char* what) const;

 private:
  struct Sequence {
    std::vector<int> pages;  // block table: logical page -> physical page
    int64_t length = 0;
  };
  // Throws the pool-exhausted EngineError unless `needed` pages are (or will be) free.
  void require_free(int64_t needed, int64_t will_free, int seq, const std::string& what) const;
  int take_page();           // the front of the free list, count 1
  void drop_page(int page);  // count - 1; at 0: poison, front of the free list
  // Replace logical page `index` of `seq` by a fresh copy of its slots below the length.
  void copy_on_write(int seq, size_t index);

  int64_t page_size_;
  int pool_pages_;
  std::vector<Sequence> seqs_;
  std::vector<int> refs_;  // per physical page: block tables holding it
  std::vector<int> free_;  // the back is the front of the free list: the next page handed out
  uint64_t generation_ = 0;
};

}  // namespace kvfuzz::paging
