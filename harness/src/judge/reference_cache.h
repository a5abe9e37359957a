// Reference rows computed once and shared: judging several engines on one scenario, and the
// properties' runs of each (every invariance judges its base run with the base's reference),
// ask for the same rows again and again. A stream's rows are a pure function of what is
// keyed here: the layout (less the page size, which the reference never sees), the token
// source (which, with the layout, gives the token table), the numerics the rows' tolerance
// is for, and the stream itself (sequence, epoch, token ids, first row). Entries are compared
// on all of it (a hash only narrows the search), so a hit returns exactly the rows a fresh
// computation would: the reference is deterministic.
//
// Per thread (no locks; kvfuzz check's workers are processes), least recently used entries
// dropped beyond kReferenceCacheBytes or kReferenceCacheEntries (a lookup scans the entries:
// a fuzz target's stream of tiny scenarios must not make that scan long).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/rows.h"
#include "kvfuzz/scenario.h"
#include "kvfuzz/token_table.h"

namespace kvfuzz {

constexpr size_t kReferenceCacheBytes = size_t{64} << 20;
constexpr size_t kReferenceCacheEntries = 256;

// reference_rows(layout, table, stream, numerics), from the cache when it holds them;
// `table` must be TokenTable(tokens, layout).
std::shared_ptr<const std::vector<ReferenceRow>> cached_reference_rows(
    const Layout& layout, const TokenSource& tokens, const TokenTable& table,
    const LogicalStream& stream, const EngineNumerics& numerics);

// This thread's cache: lookups answered from it and computed, entries and their bytes.
struct ReferenceCacheStats {
  long hits = 0, misses = 0;
  size_t entries = 0, bytes = 0;
};
ReferenceCacheStats reference_cache_stats();
void clear_reference_cache();  // entries and counters

}  // namespace kvfuzz
