// Paged K/V storage shared by the paged and flash engines: the bookkeeping of
// paging/page_table.h (pool, block tables, free list in the configured page order,
// reference counts, copy-on-write, the poison invariant) over host arrays in the layout's
// storage dtype or quantized format (kv_array.h). Element layout: K
// [page][slot][kv_head][head_dim], V [page][slot][kv_head][value_dim]. Under MLA
// (Layout::value_from_key) there is no V array: a value is read from its key's row, as
// MLA kernels read the latent they cached once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cpu/kv_array.h"
#include "kvfuzz/scenario.h"
#include "paging/page_table.h"

namespace kvfuzz::cpu {

class PagedKvStore : public paging::PageTable {
 public:
  // Throws EngineError as PageTable does; the whole pool starts poisoned.
  PagedKvStore(const Layout& layout, int sequences, std::span<const int> page_order, Poison poison);

  // Write one token's k and v at slot length(seq) and return its position. Reserves (and
  // copies a shared page) itself if the caller did not; callers reserve first so that an
  // exhausted pool throws before any position moves.
  int64_t append(int seq, const float* k, const float* v);

  // Element offsets of slot `pos` (< capacity(seq)) of `seq` for one kv head.
  size_t k_offset(int seq, int64_t pos, int kv_head) const {
    return k_row_offset(slot(seq, pos) * kv_heads_ + static_cast<size_t>(kv_head));
  }
  size_t v_offset(int seq, int64_t pos, int kv_head) const {
    return v_row_offset(slot(seq, pos) * kv_heads_ + static_cast<size_t>(kv_head));
  }
  // ... and of row `row` (physical slot x kv_heads + kv head) in keys() and values(), for a
  // reader that finds its slots itself.
  size_t k_row_offset(size_t row) const { return row * head_dim_; }
  size_t v_row_offset(size_t row) const {
    return latent_ ? row * head_dim_ + value_in_key_ : row * value_dim_;
  }
  const KvArray& keys() const { return k_; }
  const KvArray& values() const { return latent_ ? k_ : v_; }
  // Where in its key's row an MLA value starts: 0, the latent's first value_dim elements (a
  // mutant's own reading).
  void set_value_in_key(size_t offset) { value_in_key_ = offset; }
  // How quantized rows are read back (a mutant's own reading; KvArray::RowDecoder).
  void set_decoders(KvArray::RowDecoder for_keys, KvArray::RowDecoder for_values) {
    k_.set_decoder(for_keys);
    v_.set_decoder(for_values);
  }

 protected:
  void copy_slots(int from, int to, int64_t slots) override;
  void poison_slots(int page, int64_t from) override;

 private:
  size_t kv_heads_, head_dim_, value_dim_;
  bool latent_;
  size_t value_in_key_ = 0;
  float poison_;
  KvArray k_, v_;
};

}  // namespace kvfuzz::cpu
