// Shared<T>: a pointer into a block's shared memory whose every read and write is seen by
// the launcher's race check (simt.h, Checks::races). Kernels spell it
// KVFUZZ_SHARED_PTR(T) (cuda_compat.h), which is a plain T* under nvcc; on the CPU an
// element is reached only through operator[] (p[i], never *p), so that each access knows
// the line of the kernel it is on: the index converts to At, whose default argument
// std::source_location::current() is evaluated where the conversion happens, at p[i].
//
// With the check off (or outside a launch) an access costs one test of a thread-local flag.
// Elements are whole 4-byte words (the shadow state's grain): a narrower T would make two
// threads' halves of one word look like a race.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstring>
#include <source_location>

namespace kvfuzz::simt {

namespace detail {
// Whether the running block checks races (set by the launcher per block).
inline thread_local bool t_check_races = false;
// Records an access of `bytes` bytes at `address` (inside the block's shared memory) by
// the running thread and throws HazardError on a race; `written` holds the bytes a write
// stores (a write of the bits already there by another thread is no race).
void shared_access(const void* address, size_t bytes, const void* written,
                   const std::source_location& site);
}  // namespace detail

// An index, and the kernel line where it indexes.
struct At {
  long long index;
  std::source_location site;
  template <std::integral I>
  At(I i, std::source_location s = std::source_location::current())  // NOLINT: implicit
      : index(static_cast<long long>(i)), site(s) {}
};

// One element of shared memory, as p[i] names it.
template <class T>
class SharedRef {
 public:
  SharedRef(T* address, std::source_location site) : address_(address), site_(site) {}
  operator T() const {  // NOLINT: reads convert implicitly, as a T& would
    if (detail::t_check_races) detail::shared_access(address_, sizeof(T), nullptr, site_);
    return *address_;
  }
  SharedRef& operator=(T value) {
    if (detail::t_check_races) detail::shared_access(address_, sizeof(T), &value, site_);
    std::memcpy(static_cast<void*>(address_), &value, sizeof(T));
    return *this;
  }
  SharedRef& operator=(const SharedRef& other) { return *this = static_cast<T>(other); }
  SharedRef& operator+=(T value) { return *this = static_cast<T>(*this) + value; }
  SharedRef& operator*=(T value) { return *this = static_cast<T>(*this) * value; }

 private:
  T* address_;
  std::source_location site_;
};

template <class T>
class Shared {
  static_assert(sizeof(T) % 4 == 0, "shared memory is checked in 4-byte words");

 public:
  Shared() = default;
  explicit Shared(T* base) : base_(base) {}
  SharedRef<T> operator[](At at) const { return SharedRef<T>(base_ + at.index, at.site); }
  Shared operator+(long long n) const { return Shared(base_ + n); }
  // The address, for what only compares or offsets it (tests, carving a block of memory).
  T* get() const { return base_; }

 private:
  T* base_ = nullptr;
};

}  // namespace kvfuzz::simt
