// The race check (simt.h, Checks::races), in the spirit of compute-sanitizer's racecheck
// (and, for a read of a word no thread of the block wrote, of its initcheck):
// shadow state per 4-byte word of shared memory recording the last write and the reads
// since it, each with its thread, epoch (the span between two barriers of the block) and
// source line. An access conflicts with an earlier one of another thread in the same epoch
// when either writes, unless a warp operation both took part in lies between them (lanes
// of one warp; threads of different warps are ordered only by a barrier). A write of the
// bits a word already holds conflicts with no earlier write (only with reads): two threads
// storing the same value is what kernels do on purpose, and what no order changes.
//
// Per word two reads are remembered, the first two threads' but the writer's: a third
// reader is not (a race with it missed, never one made up). The state is cleared only when
// the 32-bit epoch count wraps: each block and each barrier starts a new epoch, and state
// of older epochs is stale.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/simt/launch_state.h"
#include "cuda/simt/simt.h"

namespace kvfuzz::simt {

namespace {

using state::Block;
using state::Fiber;

using detail::Word;

// One slot of a word as a report needs it.
struct Stamp {
  uint32_t epoch = 0;
  uint32_t warp_completed = 0;
  int thread = -1;
  Site site;
};

Stamp stamp_of(const Word& w, const detail::WordSites& sites, int k) {
  return Stamp{w.epoch[k], w.warp_completed[k], w.thread[k], sites.site[k]};
}

// Whether `earlier` (another thread's access in this epoch) is ordered before the running
// thread `f`'s access: lanes of one warp that both took part in a warp operation since.
bool ordered(const Stamp& earlier, const Fiber& f) {
  if (earlier.thread / kWarpSize != f.linear / kWarpSize) return false;
  return f.synced > earlier.warp_completed;
}

// "`scores`[37] (byte 148 of 8192)": the array the word lies in and the element's index.
std::string where_in(const Block& b, size_t offset, size_t element_bytes) {
  const char* name = b.dynamic_name;
  size_t start = 0, size = b.dynamic_bytes;
  for (const state::SharedArray& a : b.shared_arrays) {
    if (offset >= a.offset && offset < a.offset + a.bytes) {
      name = a.name;
      start = a.offset;
      size = a.bytes;
    }
  }
  return "`" + std::string(name) + "`[" + std::to_string((offset - start) / element_bytes) +
         "] (byte " + std::to_string(offset - start) + " of " + std::to_string(size) + ")";
}

[[noreturn]] void report(const Block& b, const Fiber& f, const Stamp& earlier, bool earlier_write,
                         bool write, const Site& site, size_t offset, size_t element_bytes) {
  const char* kind =
      earlier_write ? (write ? "write after write" : "read after write") : "write after read";
  const Fiber& other = b.fibers[static_cast<size_t>(earlier.thread)];
  const bool same_warp = earlier.thread / kWarpSize == f.linear / kWarpSize;
  throw HazardError(
      Hazard::race,
      std::string("race (") + kind + ") on shared memory " + where_in(b, offset, element_bytes) +
          ": " + state::who(b, f) + (write ? " writes it" : " reads it") + " at " +
          state::site_text(site) + " after " + state::thread_text(other) +
          (earlier_write ? " wrote it" : " read it") + " at " + state::site_text(earlier.site) +
          (same_warp ? ", lanes of one warp with no warp operation between them"
                     : ", with no __syncthreads between them"));
}

// A read of a word no thread of the block has written: what a thread that runs before the
// thread that writes it reads (the read side of a race with that write, which on a device
// may come first or last), or uninitialized memory. Either way the kernel reads poison
// here, and is stopped before it uses it (a page id read so could send it anywhere).
[[noreturn]] void unwritten(const Block& b, const Fiber& f, const Site& site, size_t offset,
                            size_t element_bytes) {
  throw HazardError(Hazard::race, "race (read before any write) on shared memory " +
                                      where_in(b, offset, element_bytes) + ": " + state::who(b, f) +
                                      " reads it at " + state::site_text(site) +
                                      " before any thread of its block wrote it: a write by "
                                      "another thread with no barrier between is a race, and "
                                      "none at all an uninitialized read");
}

}  // namespace

namespace detail {

namespace {
std::vector<Word>& words_vector() {
  thread_local std::vector<Word> words(kMaxSharedBytes / 4);
  return words;
}
}  // namespace

Word* shadow_words() {
  return words_vector().data();
}

WordSites* shadow_sites() {
  thread_local std::vector<WordSites> sites(kMaxSharedBytes / 4);
  return sites.data();
}

void clear_shadow() {
  std::vector<Word>& words = words_vector();
  std::fill(words.begin(), words.end(), Word{});
}

void shared_access(const void* address, size_t bytes, const void* written, const Site& site) {
  Block& b = state::block();
  const Fiber& f = *b.running;
  const auto* p = static_cast<const unsigned char*>(address);
  const uintptr_t at = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(b.shared);
  if (at < base || at - base + bytes > kMaxSharedBytes) {
    throw LaunchError(state::who(b, f) + ": a shared-memory pointer reaches outside the block's " +
                      std::to_string(kMaxSharedBytes) + " bytes at " + state::site_text(site));
  }
  const size_t offset = at - base;
  const bool write = written != nullptr;
  const bool same_bits = write && std::memcmp(written, p, bytes) == 0;
  const RaceView& v = t_races;
  Word* words = shadow_words();
  WordSites* sites = shadow_sites();
  for (size_t i = offset / 4; i <= (offset + bytes - 1) / 4; ++i) {
    Word& word = words[i];
    if (!write && word.epoch[kWriteSlot] < v.block_epoch) unwritten(b, f, site, offset, bytes);
    const Stamp last = stamp_of(word, sites[i], kWriteSlot);
    const bool other_write = last.epoch == v.epoch && last.thread != f.linear;
    if (other_write && !(write && same_bits) && !ordered(last, f)) {
      report(b, f, last, true, write, site, offset, bytes);
    }
    if (write) {
      for (int k = 1; k <= 2; ++k) {
        const Stamp read = stamp_of(word, sites[i], k);
        if (read.epoch == v.epoch && read.thread != f.linear && !ordered(read, f)) {
          report(b, f, read, false, write, site, offset, bytes);
        }
      }
      record(word, i, kWriteSlot, v, site);
      word.epoch[1] = word.epoch[2] = 0;
      continue;
    }
    const int k = mine_or_stale(word, 1, v) ? 1 : mine_or_stale(word, 2, v) ? 2 : 0;
    if (k != 0) record(word, i, k, v, site);
  }
}

}  // namespace detail

}  // namespace kvfuzz::simt
