// The CUDA engines' memory and launches, on either backend: the device's (cudaMalloc,
// cudaMemcpy, <<<>>>) where this file is compiled by nvcc (the device build,
// KVFUZZ_CUDA_DEVICE), host memory and the SIMT launcher standing in for them everywhere
// else (every CI run). The engine code above it is the same for both.
#pragma once

#include <cstddef>
#include <string>

namespace kvfuzz::cuda {

// One allocation of device memory, moved, never copied. Errors are EngineErrors.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `bytes` of device memory (contents undefined).
  explicit DeviceBuffer(size_t bytes);
  // `bytes` of address space of which only what is touched is backed (the SIMT backend
  // maps it lazily; the device allocates it): a wide pool, whose pages lie past 2^32
  // elements, costs only the pages it uses.
  static DeviceBuffer reserve(size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  // Grows to at least `bytes` (contents lost when it grows): a scratch buffer per step.
  void ensure(size_t bytes);

  void upload(const void* src, size_t bytes, size_t at = 0);
  void download(void* dst, size_t bytes, size_t at = 0) const;

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;  // reserve() on the SIMT backend: munmap, not free
};

// The number of multiprocessors decode splits fill: the device's, or an H200's 132 on the
// SIMT launcher (so that split counts are the same in CI as on that device).
int multiprocessors();

// Throws an EngineError naming `kernel` when its launch failed (a bad configuration on the
// device; on the SIMT launcher a LaunchError is thrown by the launch itself).
void check_launch(const char* kernel);

// The device (or "SIMT launcher on the CPU") in words, for reports.
std::string backend_name();

}  // namespace kvfuzz::cuda

// Launch and check, in engine code: KVFUZZ_RUN(kernel, grid, block, shared_bytes, args...).
#define KVFUZZ_RUN(kernel, grid, block, shared, ...)         \
  do {                                                       \
    KVFUZZ_LAUNCH(kernel, grid, block, shared, __VA_ARGS__); \
    ::kvfuzz::cuda::check_launch(#kernel);                   \
  } while (0)
