#include "cuda/engine/device_kv_pool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "cpu/dtype_array.h"
#include "cuda/kv_cache.cuh"
#include "kvfuzz/kv_format.h"

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

// What a cache of this format holds its elements as: fp8, ggml's blocks and the affine
// groups in their own bytes, no format in the dtype.
int storage_type(const KvFormat& format, DType dtype) {
  switch (format.quant) {
    case KvQuant::fp8_e4m3fn:
      return kStorageFp8E4m3;
    case KvQuant::fp8_e5m2:
      return kStorageFp8E5m2;
    case KvQuant::q8_0:
      return kStorageQ8_0;
    case KvQuant::q4_0:
      return kStorageQ4_0;
    case KvQuant::q4_1:
      return kStorageQ4_1;
    case KvQuant::q5_0:
      return kStorageQ5_0;
    case KvQuant::q5_1:
      return kStorageQ5_1;
    case KvQuant::affine2:
      return kStorageAffine2;
    case KvQuant::affine4:
      return kStorageAffine4;
    case KvQuant::affine8:
      return kStorageAffine8;
    default:
      return storage_type(dtype);
  }
}

// The units (elements, or a block pool's bytes) one slot takes in a pool of `type`.
int64_t slot_units(int type, int kv_heads, int width, int group) {
  return int64_t{kv_heads} * (is_block_type(type) ? block_row_bytes(type, width, group) : width);
}

// `value` as an element's bits, what fill_elements writes.
unsigned encoded(float value, DType dtype, const KvFormat& format) {
  if (is_fp8(format.quant)) return f32_to_fp8(value / format.scale_of(0), format.quant);
  // A block pool's every byte: scales of f16 NaN (0xFFFF) for NaN poison, else 0x7777
  // (30576) with quants 7, every element then tens of thousands; an affine group's f32
  // scale and bias NaN (0xFFFFFFFF), else 0x77777777 (5e33), every element then huge.
  if (is_ggml_block(format.quant) || is_affine(format.quant)) {
    return std::isnan(value) ? 0xFFu : 0x77u;
  }
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

// An fp8 format's scales on the device, one per kv head; nothing for the others.
DeviceBuffer device_scales(const KvFormat& format, int kv_heads) {
  if (!is_fp8(format.quant)) return {};
  std::vector<float> scales;
  for (int g = 0; g < kv_heads; ++g) scales.push_back(format.scale_of(g));
  DeviceBuffer buffer(scales.size() * sizeof(float));
  buffer.upload(scales.data(), scales.size() * sizeof(float));
  return buffer;
}

}  // namespace

DeviceKvPool::DeviceKvPool(const Layout& layout, int sequences, std::span<const int> page_order,
                           Poison poison, bool wide)
    : PageTable(layout, sequences, page_order),
      layout_(layout),
      k_type_(storage_type(layout.k_format, layout.dtype)),
      v_type_(storage_type(layout.v_format, layout.dtype)),
      k_poison_(encoded(cpu::poison_value(poison, layout.dtype), layout.dtype, layout.k_format)),
      v_poison_(encoded(cpu::poison_value(poison, layout.dtype), layout.dtype, layout.v_format)),
      k_scales_(device_scales(layout.k_format, layout.kv_heads)),
      v_scales_(device_scales(layout.v_format, layout.kv_heads)) {
  const int64_t slot_keys = slot_units(k_type_, layout.kv_heads, layout.head_dim, group());
  const int64_t slot_values = value_units();
  if (wide) {
    // The first page whose first element, in K and in V, lies at or past 2^32, as far as
    // block tables of int32 page ids reach: pages of fewer than 3 elements stay below.
    const int64_t page_elements =
        page_size() * (slot_values > 0 ? std::min(slot_keys, slot_values) : slot_keys);
    const int64_t last_id = (int64_t{1} << 31) - 1 - pool_pages();
    base_page_ = std::min(((int64_t{1} << 32) + page_elements - 1) / page_elements, last_id);
  }
  const int64_t slots = (base_page_ + pool_pages()) * page_size();
  const auto bytes = [&](int64_t per_slot, int type) {
    return static_cast<size_t>(slots * per_slot * element_bytes(type));
  };
  const size_t k_bytes = bytes(slot_keys, k_type_), v_bytes = bytes(slot_values, v_type_);
  k_ = wide ? DeviceBuffer::reserve(k_bytes) : DeviceBuffer(k_bytes);
  if (v_bytes > 0) v_ = wide ? DeviceBuffer::reserve(v_bytes) : DeviceBuffer(v_bytes);
  fill(base_page_ * page_size(), int64_t{pool_pages()} * page_size());
  tables_ = DeviceBuffer(static_cast<size_t>(sequences) * static_cast<size_t>(pool_pages()) *
                         sizeof(int));
}

void DeviceKvPool::fill(int64_t first_slot, int64_t slots) {
  const int64_t keys = slot_units(k_type_, layout_.kv_heads, layout_.head_dim, group());
  const int64_t values = value_units();
  KVFUZZ_RUN(fill_elements, element_grid(slots * keys), dim3(kCacheThreads), 0, k_.data(),
             first_slot * keys, slots * keys, k_poison_, k_type_);
  if (values == 0) return;  // MLA: no V pool
  KVFUZZ_RUN(fill_elements, element_grid(slots * values), dim3(kCacheThreads), 0, v_.data(),
             first_slot * values, slots * values, v_poison_, v_type_);
}

void DeviceKvPool::poison_slots(int page, int64_t from) {
  fill((base_page_ + page) * page_size() + from, page_size() - from);
}

void DeviceKvPool::copy_slots(int from, int to, int64_t slots) {
  const int64_t keys = slot_units(k_type_, layout_.kv_heads, layout_.head_dim, group());
  const int64_t values = value_units();
  const int64_t a = (base_page_ + from) * page_size(), b = (base_page_ + to) * page_size();
  KVFUZZ_RUN(copy_elements, element_grid(slots * keys), dim3(kCacheThreads), 0, k_.data(), a * keys,
             b * keys, slots * keys, k_type_);
  if (values == 0) return;  // MLA: no V pool
  KVFUZZ_RUN(copy_elements, element_grid(slots * values), dim3(kCacheThreads), 0, v_.data(),
             a * values, b * values, slots * values, v_type_);
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
  const bool latent = layout_.value_from_key;
  return {.k = k_.data(),
          .v = latent ? nullptr : v_.data(),
          .k_type = k_type_,
          .v_type = latent ? k_type_ : v_type_,
          .k_scales = k_scales_.bytes() ? k_scales_.as<float>() : nullptr,
          .v_scales = v_scales_.bytes() ? v_scales_.as<float>() : nullptr,
          .block_tables = tables_.as<int>(),
          .max_pages = pool_pages(),
          .page_size = static_cast<int>(page_size()),
          .kv_heads = layout_.kv_heads,
          .head_dim = layout_.head_dim,
          .value_dim = layout_.value_dim,
          .group = group(),
          .value_from_key = latent};
}

int DeviceKvPool::group() const {
  if (is_affine(layout_.k_format.quant)) return layout_.k_format.group;
  return is_affine(layout_.v_format.quant) ? layout_.v_format.group : 0;
}

int64_t DeviceKvPool::value_units() const {
  if (layout_.value_from_key) return 0;
  return slot_units(v_type_, layout_.kv_heads, layout_.value_dim, group());
}

}  // namespace kvfuzz::cuda
