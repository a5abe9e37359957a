#include "cuda/engine/device_kv_pool.h"

#include <algorithm>
#include <bit>

#include "cpu/dtype_array.h"
#include "cuda/kv_cache.cuh"

namespace kvfuzz::cuda {

namespace {

int storage_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return kStorageF32;
    case DType::f16:
      return kStorageF16;
    case DType::bf16:
      return kStorageBf16;
  }
  return kStorageF32;
}

// `value` as a `dtype` element's bits, what fill_elements writes.
unsigned encoded(float value, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return std::bit_cast<unsigned>(value);
    case DType::f16:
      return f32_to_f16(value);
    case DType::bf16:
      return f32_to_bf16(value);
  }
  return 0;
}

}  // namespace

DeviceKvPool::DeviceKvPool(const Layout& layout, int sequences, std::span<const int> page_order,
                           Poison poison, bool wide)
    : PageTable(layout, sequences, page_order),
      layout_(layout),
      dtype_(storage_type(layout.dtype)),
      poison_(encoded(cpu::poison_value(poison, layout.dtype), layout.dtype)) {
  const int64_t slot_keys = int64_t{layout.kv_heads} * layout.head_dim;
  const int64_t slot_values = int64_t{layout.kv_heads} * layout.value_dim;
  if (wide) {
    // The first page whose first element, in K and in V, lies at or past 2^32, as far as
    // block tables of int32 page ids reach: pages of fewer than 3 elements stay below.
    const int64_t page_elements = page_size() * std::min(slot_keys, slot_values);
    const int64_t last_id = (int64_t{1} << 31) - 1 - pool_pages();
    base_page_ = std::min(((int64_t{1} << 32) + page_elements - 1) / page_elements, last_id);
  }
  const int64_t slots = (base_page_ + pool_pages()) * page_size();
  const auto bytes = [&](int64_t per_slot) {
    return static_cast<size_t>(slots * per_slot * element_bytes(dtype_));
  };
  k_ = wide ? DeviceBuffer::reserve(bytes(slot_keys)) : DeviceBuffer(bytes(slot_keys));
  v_ = wide ? DeviceBuffer::reserve(bytes(slot_values)) : DeviceBuffer(bytes(slot_values));
  fill(base_page_ * page_size(), int64_t{pool_pages()} * page_size(), poison_);
  tables_ = DeviceBuffer(static_cast<size_t>(sequences) * static_cast<size_t>(pool_pages()) *
                         sizeof(int));
}

void DeviceKvPool::fill(int64_t first_slot, int64_t slots, unsigned bits) {
  const int64_t keys = int64_t{layout_.kv_heads} * layout_.head_dim;
  const int64_t values = int64_t{layout_.kv_heads} * layout_.value_dim;
  KVFUZZ_RUN(fill_elements, element_grid(slots * keys), dim3(kCacheThreads), 0, k_.data(),
             first_slot * keys, slots * keys, bits, dtype_);
  KVFUZZ_RUN(fill_elements, element_grid(slots * values), dim3(kCacheThreads), 0, v_.data(),
             first_slot * values, slots * values, bits, dtype_);
}

void DeviceKvPool::poison_slots(int page, int64_t from) {
  fill((base_page_ + page) * page_size() + from, page_size() - from, poison_);
}

void DeviceKvPool::copy_slots(int from, int to, int64_t slots) {
  const int64_t keys = int64_t{layout_.kv_heads} * layout_.head_dim;
  const int64_t values = int64_t{layout_.kv_heads} * layout_.value_dim;
  const int64_t a = (base_page_ + from) * page_size(), b = (base_page_ + to) * page_size();
  KVFUZZ_RUN(copy_elements, element_grid(slots * keys), dim3(kCacheThreads), 0, k_.data(), a * keys,
             b * keys, slots * keys, dtype_);
  KVFUZZ_RUN(copy_elements, element_grid(slots * values), dim3(kCacheThreads), 0, v_.data(),
             a * values, b * values, slots * values, dtype_);
}

PagedKv DeviceKvPool::view() {
  if (tables_generation_ != generation()) {
    // Entries past a sequence's pages name the pool's first page: a kernel that reads past
    // its row's length reads some page's slots (poison or another row's keys), never
    // outside the pool.
    const size_t width = static_cast<size_t>(pool_pages());
    host_tables_.assign(static_cast<size_t>(sequences()) * width, device_page(0));
    for (int seq = 0; seq < sequences(); ++seq) {
      const std::span<const int> held = pages(seq);
      for (size_t i = 0; i < held.size(); ++i) {
        host_tables_[static_cast<size_t>(seq) * width + i] = device_page(held[i]);
      }
    }
    tables_.upload(host_tables_.data(), host_tables_.size() * sizeof(int));
    tables_generation_ = generation();
  }
  return {.k = k_.data(),
          .v = v_.data(),
          .dtype = dtype_,
          .block_tables = tables_.as<int>(),
          .max_pages = pool_pages(),
          .page_size = static_cast<int>(page_size()),
          .kv_heads = layout_.kv_heads,
          .head_dim = layout_.head_dim,
          .value_dim = layout_.value_dim};
}

}  // namespace kvfuzz::cuda
