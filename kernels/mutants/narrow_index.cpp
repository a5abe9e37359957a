// Narrow-integer mutants (issue 15): the paged engine with one index kept in a type too
// narrow for the pools the generator's wide pools reach (generate/integer_limits.h).
//
//  * block-table-u8: the attention kernel's copy of the block table holds uint8_t, so a
//    physical page >= 2^8 is read as page mod 256 (another sequence's page, or poison).
//  * slot-offset-u16: the kernel computes a key's physical slot (page x page_size + slot
//    in page) in uint16_t, so a slot >= 2^16 is read at slot mod 65536.
//  * slot-mapping-i16: the cache write's slot mapping holds int16_t and, as slot mappings
//    do, treats a negative slot as a padding token and writes nothing: the K/V of a token
//    whose slot is in [2^15, 2^16) is never stored, and its slot keeps the poison.
//
// All three stay inside the pool (a narrowed index is never larger than the true one), so
// they fail on values, never on memory.
#include <cstdint>
#include <vector>

#include "cpu/paged_engine.h"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

// The paged engine whose reads locate key j through `Narrow::slot(page, page_size, j)`.
template <class Narrow>
class NarrowReadEngine final : public Mutant<cpu::PagedEngine> {
 public:
  using Mutant::Mutant;

 protected:
  void attend(const Query& query, int kv_head, cpu::KeyRange keys, float* out) override {
    const cpu::PagedKvStore& store = kv();
    const auto pages = store.pages(query.seq);
    const int64_t page_size = layout().page_size;
    const auto kv_heads = static_cast<size_t>(layout().kv_heads);
    const auto head_dim = static_cast<size_t>(layout().head_dim);
    const auto value_dim = static_cast<size_t>(layout().value_dim);
    const auto key_at = [&](int64_t j) {
      const int page = pages[static_cast<size_t>(j / page_size)];
      const size_t slot = Narrow::slot(page, page_size, j % page_size);
      const size_t row = slot * kv_heads + static_cast<size_t>(kv_head);
      return cpu::KvOffsets{store.k_row_offset(row), store.v_row_offset(row)};
    };
    const cpu::KvArrays arrays{store.keys(), store.values(), head_dim, value_dim};
    cpu::single_pass_attention(query.q, keys, scale(), arrays, key_at, arithmetic(),
                               logit_features(query), scratch_, out);
  }

 private:
  cpu::AttentionScratch scratch_;
};

struct PageInUint8 {
  static size_t slot(int page, int64_t page_size, int64_t in_page) {
    const auto entry = static_cast<uint8_t>(page);  // BUG: block-table entries in 8 bits
    return static_cast<size_t>(entry) * static_cast<size_t>(page_size) +
           static_cast<size_t>(in_page);
  }
};

struct SlotInUint16 {
  static size_t slot(int page, int64_t page_size, int64_t in_page) {
    const auto slot = static_cast<uint16_t>(page * page_size + in_page);  // BUG: 16 bits
    return slot;
  }
};

// The paged engine whose cache write skips a token whose slot is negative as int16_t.
class SlotMappingInt16Engine final : public Mutant<cpu::PagedEngine> {
 public:
  explicit SlotMappingInt16Engine(const EngineConfig& config)
      : Mutant(config),
        poison_k_(static_cast<size_t>(config.layout.kv_heads * config.layout.head_dim),
                  cpu::poison_value(config.poison, config.layout.dtype)),
        poison_v_(static_cast<size_t>(config.layout.kv_heads * config.layout.value_dim),
                  cpu::poison_value(config.poison, config.layout.dtype)) {}

 protected:
  int64_t store(int seq, const float* k, const float* v) override {
    const cpu::PagedKvStore& kv_now = kv();
    const int64_t page_size = layout().page_size;
    const int64_t pos = kv_now.length(seq);
    if (pos < kv_now.capacity(seq)) {  // reserved by begin_chunk, as the step loop does
      const int64_t slot =
          kv_now.pages(seq)[static_cast<size_t>(pos / page_size)] * page_size + pos % page_size;
      // BUG: the slot mapping's int16_t; a negative slot means "padding, write nothing".
      if (static_cast<int16_t>(slot) < 0) {
        return kv_store().append(seq, poison_k_.data(), poison_v_.data());
      }
    }
    return Mutant::store(seq, k, v);
  }

 private:
  std::vector<float> poison_k_, poison_v_;
};

}  // namespace

std::unique_ptr<Engine> make_block_table_u8(const EngineConfig& config) {
  return std::make_unique<NarrowReadEngine<PageInUint8>>(config);
}

std::unique_ptr<Engine> make_slot_offset_u16(const EngineConfig& config) {
  return std::make_unique<NarrowReadEngine<SlotInUint16>>(config);
}

std::unique_ptr<Engine> make_slot_mapping_i16(const EngineConfig& config) {
  return std::make_unique<SlotMappingInt16Engine>(config);
}

}  // namespace kvfuzz::mutants
