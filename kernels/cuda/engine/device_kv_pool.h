// The CUDA engines' paged cache: paging/page_table.h's bookkeeping (block tables, free
// list in the scenario's page order, reference counts, copy-on-write) over K and V pools in
// device memory, in the layout's storage dtype, an fp8 format with its per-kv-head scales, or
// one of ggml's block formats or MLX's affine groups, a row of whole blocks (kv_format.h);
// under MLA (value_from_key) a K pool only. Freed pages and dropped slots are
// poisoned by a fill kernel, copies made by a copy kernel, so the pool keeps the poison invariant
// on the device as the CPU engines' pool does on the host.
//
// A wide pool (base_page > 0) places physical page i at page base_page + i of a larger
// reservation, past 2^32 elements: what a cache filling a large GPU's memory looks like to
// a kernel's offset arithmetic. device_page() is the id the block tables hold (int32, as
// real block tables are, so pages of 1 or 2 elements cannot reach past 2^32).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cuda/engine/device_memory.h"
#include "cuda/paged_kv.cuh"
#include "kvfuzz/scenario.h"
#include "paging/page_table.h"

namespace kvfuzz::cuda {

class DeviceKvPool : public paging::PageTable {
 public:
  // wide: base_page the first page past 2^32 elements of K and of V (see above); else 0.
  DeviceKvPool(const Layout& layout, int sequences, std::span<const int> page_order, Poison poison,
               bool wide);

  int64_t base_page() const { return base_page_; }
  int device_page(int page) const { return static_cast<int>(base_page_ + page); }
  // The physical slot the kernels address for position pos of seq (base included).
  long long device_slot(int seq, int64_t pos) const {
    return static_cast<long long>(slot(seq, pos)) + base_page_ * page_size();
  }
  // The cache as kernels see it, with the device block tables (uploaded when stale).
  PagedKv view();

 protected:
  void copy_slots(int from, int to, int64_t slots) override;
  void poison_slots(int page, int64_t from) override;

 private:
  void fill(int64_t first_slot, int64_t slots);
  int64_t value_units() const;  // a slot's units in the V pool; 0 for MLA, which has none
  int group() const;            // the affine format's group size (K and V share it), or 0

  Layout layout_;
  int k_type_, v_type_;  // StorageType: the dtype's, or the fp8 format's
  // The poison's encoding in each (fp8: poison / the first kv head's scale, so that a read
  // of a poisoned slot stays huge or NaN whatever its head's scale).
  unsigned k_poison_, v_poison_;
  int64_t base_page_ = 0;
  DeviceBuffer k_, v_;
  DeviceBuffer k_scales_, v_scales_;  // fp8: [kv_head]
  DeviceBuffer tables_;               // [sequence][pool_pages] device page ids
  std::vector<int> host_tables_;
  uint64_t tables_generation_ = ~uint64_t{0};
};

}  // namespace kvfuzz::cuda
