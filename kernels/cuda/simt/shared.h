// Shared<T>: a pointer into a block's shared memory whose every read and write is seen by
// the launcher's race check (simt.h, Checks::races). Kernels spell it
// KVFUZZ_SHARED_PTR(T) (cuda_compat.h), which is a plain T* under nvcc; on the CPU an
// element is reached only through operator[] (p[i], never *p), so that each access knows
// the line of the kernel it is on: the index converts to At, whose default arguments
// __builtin_FILE and __builtin_LINE are evaluated where the conversion happens, at p[i].
//
// With the check off (or outside a launch) an access costs one test of a thread-local flag;
// with it on, an access no other thread's access of the same epoch touched is settled
// inline, the rest in shared_races.cpp.
// Elements are whole 4-byte words (the shadow state's grain): a narrower T would make two
// threads' halves of one word look like a race.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvfuzz::simt {

namespace detail {

// The race check's shadow state (shared_races.cpp): per 4-byte word of shared memory the
// last write and up to two reads of the current span between barriers (an epoch), each
// as the epoch, its warp's count of completed warp operations, its thread and (apart, in
// WordSites, touched only when recorded) its line. Slot 0 is the write, slots 1 and 2 the
// first two readers but the writer. 32 bytes a word, two to a cache line: the check's
// cost is its loads.
struct Word {
  uint32_t epoch[3] = {0, 0, 0};  // 0: none
  uint32_t warp_completed[3] = {0, 0, 0};
  int16_t thread[3] = {-1, -1, -1};  // the block's linear thread index
};
struct WordSites {
  Site site[3];
};
constexpr int kWriteSlot = 0;

// What an access needs to know, kept current by the launcher (at each block, barrier and
// fiber switch) so that the common access is settled inline.
struct RaceView {
  bool on = false;                // the running block checks races
  unsigned char* base = nullptr;  // the block's shared memory
  Word* words = nullptr;          // its shadow state, a Word per 4 bytes
  WordSites* sites = nullptr;     // and the lines of what the words record
  uint32_t epoch = 0;             // the running block's current epoch
  uint32_t block_epoch = 0;       // its first: a word last written before it is unwritten
  int16_t thread = 0;             // the running thread
  uint32_t warp_completed = 0;    // its warp's completed operations
};
inline thread_local RaceView t_races;
// The calling thread's shadow state, kMaxSharedBytes / 4 words, kept from launch to launch
// (cleared when the 32-bit epoch count wraps).
Word* shadow_words();
WordSites* shadow_sites();
void clear_shadow();

// The access another thread's record conflicts with: the slow path, which decides with the
// warp ordering, reports a race (HazardError) or records it.
void shared_access(const void* address, size_t bytes, const void* written, const Site& site);

// Whether slot `k` of `w` holds nothing of this epoch or the running thread's own access.
inline bool mine_or_stale(const Word& w, int k, const RaceView& v) {
  return w.epoch[k] != v.epoch || w.thread[k] == v.thread;
}

inline void record(Word& w, size_t index, int k, const RaceView& v, const Site& site) {
  w.epoch[k] = v.epoch;
  w.warp_completed[k] = v.warp_completed;
  w.thread[k] = v.thread;
  v.sites[index].site[k] = site;
}

// The shadow word of a whole, aligned 4-byte element of the block's shared memory; nullptr
// for anything else (the slow path checks and reports it).
inline Word* word_of(const RaceView& v, const void* address, size_t bytes, size_t& index) {
  const size_t offset = reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(v.base);
  if (bytes != 4 || offset >= kMaxSharedBytes || offset % 4 != 0) return nullptr;
  index = offset / 4;
  return v.words + index;
}

inline void on_read(const void* address, size_t bytes, const Site& site) {
  const RaceView& v = t_races;
  size_t index = 0;
  Word* w = word_of(v, address, bytes, index);
  if (w == nullptr || w->epoch[kWriteSlot] < v.block_epoch || !mine_or_stale(*w, kWriteSlot, v)) {
    shared_access(address, bytes, nullptr, site);
    return;
  }
  // The first reader of this epoch, else the second distinct one; a third is not kept (a
  // race with it may go unseen, none is made up). A read this thread recorded since its
  // last warp operation needs nothing new.
  const int k = mine_or_stale(*w, 1, v) ? 1 : mine_or_stale(*w, 2, v) ? 2 : 0;
  if (k == 0) return;
  if (w->epoch[k] == v.epoch && w->warp_completed[k] == v.warp_completed) return;
  record(*w, index, k, v, site);
}

inline void on_write(const void* address, size_t bytes, const void* written, const Site& site) {
  const RaceView& v = t_races;
  size_t index = 0;
  Word* w = word_of(v, address, bytes, index);
  if (w == nullptr || !mine_or_stale(*w, 0, v) || !mine_or_stale(*w, 1, v) ||
      !mine_or_stale(*w, 2, v)) {
    shared_access(address, bytes, written, site);
    return;
  }
  record(*w, index, kWriteSlot, v, site);
  w->epoch[1] = w->epoch[2] = 0;
}

}  // namespace detail

// An index, and the kernel line where it indexes.
struct At {
  long long index;
  Site site;
  template <std::integral I>
  At(I i, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE())  // NOLINT
      : index(static_cast<long long>(i)), site{file, line} {}
};

// One element of shared memory, as p[i] names it.
template <class T>
class SharedRef {
 public:
  SharedRef(T* address, Site site) : address_(address), site_(site) {}
  operator T() const {  // NOLINT: reads convert implicitly, as a T& would
    if (detail::t_races.on) detail::on_read(address_, sizeof(T), site_);
    return *address_;
  }
  SharedRef& operator=(T value) {
    if (detail::t_races.on) detail::on_write(address_, sizeof(T), &value, site_);
    std::memcpy(static_cast<void*>(address_), &value, sizeof(T));
    return *this;
  }
  SharedRef& operator=(const SharedRef& other) { return *this = static_cast<T>(other); }
  SharedRef& operator+=(T value) { return *this = static_cast<T>(*this) + value; }
  SharedRef& operator*=(T value) { return *this = static_cast<T>(*this) * value; }

 private:
  T* address_;
  Site site_;
};

template <class T>
class Shared {
  static_assert(sizeof(T) % 4 == 0, "shared memory is checked in 4-byte words");

 public:
  Shared() = default;
  explicit Shared(T* base) : base_(base) {}
  SharedRef<T> operator[](At at) const { return SharedRef<T>(base_ + at.index, at.site); }
  Shared operator+(long long n) const { return Shared(base_ + n); }

 private:
  T* base_ = nullptr;
};

}  // namespace kvfuzz::simt
