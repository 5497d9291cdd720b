// Storage and the per-device-type allocator registry (CPU: aligned heap memory with a cache
// of large blocks).
#include "tensor/storage.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/error.h"

namespace minidl {
namespace {

// 64-byte aligned heap memory. Blocks of 1 MiB and more are cached by (page-rounded) size
// after free, up to 1 GiB in all: a training loop frees and re-allocates the same activation
// sizes every step, and fresh pages from the OS page-fault on first touch (glibc mmaps and
// unmaps every block above its threshold; that cost ~15% of a 4096x4096x512 matmul here).
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    const size_t size = rounded(nbytes);
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, size);
    if (!p) {
      empty_cache();
      p = std::aligned_alloc(64, size);
    }
    if (!p) MINIDL_FAIL("out of CPU memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t nbytes, Device) override {
    const size_t size = rounded(nbytes);
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= kCacheCap) {
        free_[size].push_back(p);
        cached_ += size;
        return;
      }
    }
    std::free(p);
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  static constexpr size_t kCacheMin = size_t(1) << 20;
  static constexpr size_t kCacheCap = size_t(1) << 30;
  static size_t rounded(size_t n) {
    return n >= kCacheMin ? (n + 4095) / 4096 * 4096 : (n + 63) / 64 * 64;
  }
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

// Never destroyed: tensors held in other static objects may be freed after main returns.
CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();
  return *a;
}
Allocator* g_allocators[kNumDeviceTypes] = {nullptr, nullptr};

}  // namespace

Allocator& get_allocator(DeviceType type) {
  Allocator* a =
      type == DeviceType::cpu && !g_allocators[0] ? &cpu_allocator() : g_allocators[int(type)];
  MINIDL_CHECK(a, "no allocator for ", device_type_name(type),
               " tensors: this build has no CUDA backend or no GPU is available");
  return *a;
}

void set_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[int(type)] = allocator;
}

namespace {

constexpr int kMaxDeviceIndex = 64;
struct DeviceCounters {
  std::atomic<int64_t> allocated{0}, peak{0};
};
DeviceCounters g_counters[kNumDeviceTypes][kMaxDeviceIndex];

DeviceCounters* counters_of(Device d) {
  return d.index >= 0 && d.index < kMaxDeviceIndex ? &g_counters[int(d.type)][d.index] : nullptr;
}

void count_allocation(Device d, int64_t delta) {
  DeviceCounters* c = counters_of(d);
  if (!c) return;
  int64_t now = c->allocated.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = c->peak.load(std::memory_order_relaxed);
  while (now > peak && !c->peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

MemoryStats memory_stats(Device device) {
  const DeviceCounters* c = counters_of(device);
  if (!c) return {};
  return {c->allocated.load(std::memory_order_relaxed), c->peak.load(std::memory_order_relaxed)};
}

void reset_peak_memory_stats(Device device) {
  if (DeviceCounters* c = counters_of(device))
    c->peak.store(c->allocated.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  data_ = get_allocator(device.type).allocate(nbytes, device);
  count_allocation(device_, int64_t(nbytes_));
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    if (data_) get_allocator(device_.type).deallocate(data_, nbytes_, device_);
    count_allocation(device_, -int64_t(nbytes_));
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace minidl
