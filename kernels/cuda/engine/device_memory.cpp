#include "cuda/engine/device_memory.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "kvfuzz/engine.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#else
#include <sys/mman.h>
#endif

namespace kvfuzz::cuda {

namespace {

#ifdef __CUDACC__
void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    throw EngineError("CUDA: " + what + ": " + cudaGetErrorString(status));
  }
}
#endif

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
#ifdef __CUDACC__
  check(cudaMalloc(&data_, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
#else
  data_ = std::malloc(bytes);
  if (data_ == nullptr) throw EngineError("out of memory: " + std::to_string(bytes) + " bytes");
#endif
}

DeviceBuffer DeviceBuffer::reserve(size_t bytes) {
#ifdef __CUDACC__
  return DeviceBuffer(bytes);
#else
  DeviceBuffer buffer;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw EngineError("cannot reserve " + std::to_string(bytes) + " bytes of address space");
  }
  buffer.data_ = p;
  buffer.bytes_ = bytes;
  buffer.mapped_ = true;
  return buffer;
#endif
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

void DeviceBuffer::release() {
  if (data_ == nullptr) return;
#ifdef __CUDACC__
  cudaFree(data_);
#else
  if (mapped_) {
    munmap(data_, bytes_);
  } else {
    std::free(data_);
  }
#endif
  data_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::ensure(size_t bytes) {
  if (bytes > bytes_) *this = DeviceBuffer(bytes);
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t at) {
  if (bytes == 0) return;
#ifdef __CUDACC__
  check(cudaMemcpy(static_cast<char*>(data_) + at, src, bytes, cudaMemcpyHostToDevice),
        "copy to the device");
#else
  std::memcpy(static_cast<char*>(data_) + at, src, bytes);
#endif
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t at) const {
  if (bytes == 0) return;
#ifdef __CUDACC__
  // cudaMemcpy waits for the kernels before it: their errors surface here.
  check(cudaMemcpy(dst, static_cast<const char*>(data_) + at, bytes, cudaMemcpyDeviceToHost),
        "copy from the device");
#else
  std::memcpy(dst, static_cast<const char*>(data_) + at, bytes);
#endif
}

int multiprocessors() {
#ifdef __CUDACC__
  static const int count = [] {
    int device = 0, sms = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
          "multiprocessor count");
    return sms;
  }();
  return count;
#else
  return 132;
#endif
}

void check_launch(const char* kernel) {
#ifdef __CUDACC__
  check(cudaGetLastError(), std::string("launch of ") + kernel);
#else
  (void)kernel;
#endif
}

std::string backend_name() {
#ifdef __CUDACC__
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    return prop.name;
  }
  return "CUDA device";
#else
  return "SIMT launcher on the CPU";
#endif
}

}  // namespace kvfuzz::cuda
