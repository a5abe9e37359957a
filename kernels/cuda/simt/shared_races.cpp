// The race check (simt.h, Checks::races), in the spirit of compute-sanitizer's racecheck:
// shadow state per 4-byte word of shared memory recording the last write and the reads
// since it, each with its thread, epoch (the span between two barriers of the block) and
// source line. An access conflicts with an earlier one of another thread in the same epoch
// when either writes, unless a warp operation both took part in lies between them (lanes
// of one warp; threads of different warps are ordered only by a barrier). A write of the
// bits a word already holds conflicts with no earlier write (only with reads): two threads
// storing the same value is what kernels do on purpose, and what no order changes.
//
// Per word two reads are remembered, the first and the latest of other threads: a third
// reader may be forgotten (a race missed, never one made up). The state is never cleared:
// each block and each barrier starts a new epoch, and state of older epochs is stale.
#include <cstring>
#include <string>
#include <vector>

#include "cuda/simt/launch_state.h"
#include "cuda/simt/simt.h"

namespace kvfuzz::simt {

namespace {

using state::Block;
using state::Fiber;

// One access as remembered: by which thread, in which epoch, after how many completed
// operations of its warp, and where in the kernel.
struct Stamp {
  uint64_t epoch = 0;  // 0: none
  int thread = -1;     // the block's linear thread index
  uint64_t warp_completed = 0;
  Site site;
  bool write = false;
};

struct Word {
  Stamp write;
  Stamp read[2];  // the first and the latest reader of this epoch but the writer
};

std::vector<Word>& shadow() {
  thread_local std::vector<Word> words(kMaxSharedBytes / 4);
  return words;
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

[[noreturn]] void report(const Block& b, const Fiber& f, const Stamp& earlier, bool write,
                         const Site& site, size_t offset, size_t element_bytes) {
  const char* kind =
      earlier.write ? (write ? "write after write" : "read after write") : "write after read";
  const Fiber& other = b.fibers[static_cast<size_t>(earlier.thread)];
  const bool same_warp = earlier.thread / kWarpSize == f.linear / kWarpSize;
  throw HazardError(
      Hazard::race,
      std::string("race (") + kind + ") on shared memory " + where_in(b, offset, element_bytes) +
          ": " + state::who(b, f) + (write ? " writes it" : " reads it") + " at " +
          state::site_text(site) + " after " + state::thread_text(other) +
          (earlier.write ? " wrote it" : " read it") + " at " + state::site_text(earlier.site) +
          (same_warp ? ", lanes of one warp with no warp operation between them"
                     : ", with no __syncthreads between them"));
}

}  // namespace

namespace detail {

void shared_access(const void* address, size_t bytes, const void* written,
                   const std::source_location& site) {
  Block& b = state::block();
  const Fiber& f = *b.running;
  const auto* p = static_cast<const unsigned char*>(address);
  if (p < b.shared || p + bytes > b.shared + kMaxSharedBytes) {
    throw LaunchError(state::who(b, f) + ": a shared-memory pointer reaches outside the block's " +
                      std::to_string(kMaxSharedBytes) + " bytes at " + state::site_text(site));
  }
  const size_t offset = static_cast<size_t>(p - b.shared);
  const bool write = written != nullptr;
  const bool same_bits = write && std::memcmp(written, p, bytes) == 0;
  const Stamp now{b.epoch, f.linear, b.warps[static_cast<size_t>(f.linear / kWarpSize)].completed,
                  site, write};
  std::vector<Word>& words = shadow();
  for (size_t w = offset / 4; w <= (offset + bytes - 1) / 4; ++w) {
    Word& word = words[w];
    const Stamp& last = word.write;
    const bool other_write = last.epoch == b.epoch && last.thread != f.linear;
    if (other_write && !(write && same_bits) && !ordered(last, f)) {
      report(b, f, last, write, site, offset, bytes);
    }
    if (write) {
      for (const Stamp& read : word.read) {
        if (read.epoch == b.epoch && read.thread != f.linear && !ordered(read, f)) {
          report(b, f, read, write, site, offset, bytes);
        }
      }
      word.write = now;
      word.read[0].epoch = word.read[1].epoch = 0;
      continue;
    }
    if (word.read[0].epoch != b.epoch || word.read[0].thread == f.linear) {
      word.read[0] = now;
    } else {
      word.read[1] = now;
    }
  }
}

}  // namespace detail

}  // namespace kvfuzz::simt
