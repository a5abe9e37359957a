#include "judge/reference_cache.h"

#include <bit>
#include <list>
#include <utility>

#include "judge/reference.h"
#include "support/hash.h"

namespace kvfuzz {

namespace {

struct Key {
  Layout layout;  // page_size 0
  TokenSource tokens;
  EngineNumerics numerics;
  int seq = 0, epoch = 0;
  int64_t first_row = 0;
  std::vector<int> stream;
  uint64_t hash = 0;
  bool operator==(const Key&) const = default;
};

// A hash of the key's cheap parts (everything but the explicit tokens' values and the
// numerics, which equality compares).
uint64_t hash_of(const Key& key) {
  Fnv1a h;
  for (const int x :
       {key.layout.q_heads, key.layout.kv_heads, key.layout.head_dim, key.layout.value_dim,
        static_cast<int>(key.layout.dtype), key.layout.window.value_or(-1), key.seq, key.epoch}) {
    h.add_u64(static_cast<uint64_t>(x));
  }
  h.add_u64(std::bit_cast<uint64_t>(key.layout.rope_theta.value_or(-1.0)));
  h.add_u64(std::bit_cast<uint64_t>(key.layout.scale.value_or(-1.0)));
  h.add_u64(static_cast<uint64_t>(key.first_row));
  for (const int id : key.stream) h.add_u64(static_cast<uint64_t>(id));
  if (const auto* generated = std::get_if<GeneratedTokens>(&key.tokens)) {
    h.add_u64(generated->seed);
    h.add_u64(static_cast<uint64_t>(generated->count));
    h.add_u64(static_cast<uint64_t>(generated->distribution));
    h.add_u64(generated->zero_scores ? 1 : 0);
    h.add_u64(static_cast<uint64_t>(generated->qk_log2));
  } else {
    h.add_u64(std::get<std::vector<ExplicitToken>>(key.tokens).size());
  }
  return h.value();
}

size_t bytes_of(const std::vector<ReferenceRow>& rows) {
  size_t bytes = sizeof(rows);
  for (const ReferenceRow& row : rows) {
    bytes += sizeof(row) +
             sizeof(double) * (row.values.size() + row.bound.size() + row.value_scale.size()) +
             sizeof(BoundParts) * row.bound_parts.size();
  }
  return bytes;
}

struct Entry {
  Key key;
  std::shared_ptr<const std::vector<ReferenceRow>> rows;
  size_t bytes = 0;
};

struct Cache {
  std::list<Entry> entries;  // most recently used first
  ReferenceCacheStats stats;
};

Cache& cache() {
  thread_local Cache c;
  return c;
}

}  // namespace

std::shared_ptr<const std::vector<ReferenceRow>> cached_reference_rows(
    const Layout& layout, const TokenSource& tokens, const TokenTable& table,
    const LogicalStream& stream, const EngineNumerics& numerics) {
  Key key{layout, tokens, numerics, stream.seq, stream.epoch, stream.first_row, stream.tokens};
  key.layout.page_size = 0;
  key.hash = hash_of(key);
  Cache& c = cache();
  for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
    if (it->key.hash != key.hash || !(it->key == key)) continue;
    ++c.stats.hits;
    c.entries.splice(c.entries.begin(), c.entries, it);
    return c.entries.front().rows;
  }
  ++c.stats.misses;
  auto rows = std::make_shared<const std::vector<ReferenceRow>>(
      reference_rows(layout, table, stream, numerics));
  const size_t bytes = bytes_of(*rows);
  if (bytes > kReferenceCacheBytes) return rows;  // too large to keep
  c.entries.push_front(Entry{std::move(key), rows, bytes});
  c.stats.bytes += bytes;
  while (c.stats.bytes > kReferenceCacheBytes || c.entries.size() > kReferenceCacheEntries) {
    c.stats.bytes -= c.entries.back().bytes;
    c.entries.pop_back();
  }
  c.stats.entries = c.entries.size();
  return rows;
}

ReferenceCacheStats reference_cache_stats() {
  ReferenceCacheStats stats = cache().stats;
  stats.entries = cache().entries.size();
  return stats;
}

void clear_reference_cache() {
  cache() = Cache{};
}

}  // namespace kvfuzz
