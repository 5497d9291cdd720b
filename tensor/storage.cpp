// Storage and the per-device-type allocator registry (CPU: 64-byte aligned heap memory).
#include "tensor/storage.h"

#include <malloc.h>

#include <cstdlib>
#include <new>

#include "tensor/error.h"

namespace minidl {
namespace {

struct CpuAllocator final : Allocator {
  CpuAllocator() {
    // Keep large freed blocks in the heap instead of returning them to the OS: a training
    // loop frees and re-allocates same-sized activations every step, and fresh mmap'd pages
    // page-fault on first touch (~20% of a 1024^3 GEMM's time here). glibc's defaults would
    // mmap/munmap every block above 32 MiB.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  void* allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) MINIDL_FAIL("out of CPU memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t, Device) override { std::free(p); }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[kNumDeviceTypes] = {&g_cpu_allocator, nullptr};

}  // namespace

Allocator& get_allocator(DeviceType type) {
  Allocator* a = g_allocators[int(type)];
  MINIDL_CHECK(a, "no allocator for ", device_type_name(type),
               " tensors: this build has no CUDA backend or no GPU is available");
  return *a;
}

void set_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[int(type)] = allocator;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  data_ = get_allocator(device.type).allocate(nbytes, device);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    if (data_) get_allocator(device_.type).deallocate(data_, nbytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace minidl
