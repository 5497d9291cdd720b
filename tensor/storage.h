// Storage: a refcounted block of device memory shared by a tensor and its views, plus the
// per-device allocator hook (the CUDA backend installs its caching allocator here).
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace minidl {

struct Allocator {
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  // Returns cached free blocks to the system (torch.cuda.empty_cache()).
  virtual void empty_cache() {}
  // Bytes of freed blocks the allocator holds for reuse (0 for one without a cache).
  virtual int64_t cached_bytes() const { return 0; }
};

// The allocator used for new storages on a device type. CPU has a 64-byte aligned one by
// default; CUDA is installed by the CUDA backend. Throws if none is installed.
Allocator& get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);
// Releases the cached free memory of a device type's allocator.
inline void empty_cache(DeviceType type = DeviceType::cpu) {
  get_allocator(type).empty_cache();
}

// The CPU allocator caches freed blocks of >= 1 MiB for reuse, least recently freed evicted
// first once the cache would exceed this cap; a miss of >= 32 MiB first releases cached blocks
// below 32 MiB worth it, and an allocation that fails empties the cache and retries. The
// default cap starts at 512 MiB (or 1/16 of physical memory if that is less) and grows while
// the cache thrashes: a miss of a size it evicted raises it by that size (at least a quarter of
// the cap), up to the most bytes of such blocks the program has held at once and 1/4 of
// physical memory (a training step whose large blocks exceed 512 MiB stops re-faulting them
// every step). set_cpu_cache_cap fixes
// the cap (trimming the cache to it at once; 0 disables caching), as the environment variable
// MINIDL_CPU_CACHE_CAP=<MiB> does from the start; reset_cpu_cache_cap returns to the adaptive
// default.
inline constexpr int64_t kDefaultCpuCacheCap = int64_t(512) << 20;
void set_cpu_cache_cap(int64_t bytes);
void reset_cpu_cache_cap();
int64_t cpu_cache_cap();

// Bytes held by tensor storages allocated on a device (torch.cuda.memory_allocated /
// max_memory_allocated, for every device type): current and peak since the last reset;
// `cached`: free bytes the device type's allocator keeps for reuse (torch.cuda.memory_reserved
// minus memory_allocated), shared by all devices of the type.
struct MemoryStats {
  int64_t allocated = 0;
  int64_t peak = 0;
  int64_t cached = 0;
};
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);

class Storage {
 public:
  // Allocates nbytes on `device` with its allocator.
  Storage(size_t nbytes, Device device);
  // Wraps external memory; `deleter` (may be empty) runs when the last user goes away.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Gives an owned storage's memory back to its allocator, keeping nbytes(), and takes it
  // again (contents undefined): FullyShardedDataParallel frees a gathered parameter after a
  // unit's forward and re-gathers it before its backward, while the views autograd saved stay
  // valid (torch's storage().resize_(0)). data() is null in between.
  void release_data();
  void restore_data();
  bool has_data() const { return data_ != nullptr || nbytes_ == 0; }

  // Version counter shared by all views: bumped by in-place writes (autograd checks it).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = false;  // allocated by get_allocator(device_.type)
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace minidl
