// Storage and the per-device-type allocator registry (CPU: aligned heap memory with a bounded
// LRU cache of large blocks), and the per-device allocation counters behind memory_stats.
#include "tensor/storage.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_api.h"
#include "tensor/kernel_registration.h"
#include "tensor/error.h"

namespace minidl {
namespace {

// 64-byte aligned heap memory. Blocks of 1 MiB and more are cached by (page-rounded) size
// after free: a training loop frees and re-allocates the same activation sizes every step, and
// fresh pages from the OS page-fault on first touch (glibc mmaps and unmaps every block above
// its threshold; that cost ~15% of a 4096x4096x512 matmul here). The cache is bounded by
// cap_ (see set_cpu_cache_cap), and a miss of >= 32 MiB first returns cached blocks below
// 32 MiB worth the new block to the system (least recently freed first): the training step's
// blocks do not stay pinned beside a large evaluation batch. The default cap adapts: a miss of
// a size the cap or such a release evicted (a step whose large blocks outnumber the cap,
// evicted before they recur) raises it by that size or a quarter of the cap, whichever is
// more, up to the most large-block bytes held at once and 1/4 of physical memory. A cap set by
// set_cpu_cache_cap or MINIDL_CPU_CACHE_CAP (MiB) stays fixed.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : cap_(default_cap()) {
    const char* env = std::getenv("MINIDL_CPU_CACHE_CAP");
    if (env && *env) {  // set and not empty
      char* end = nullptr;
      const long long mib = std::strtoll(env, &end, 10);
      MINIDL_CHECK(*end == '\0' && mib >= 0 && mib < (1LL << 40),
                   "MINIDL_CPU_CACHE_CAP: expected the CPU allocator's cache cap in MiB (a "
                   "non-negative integer; 0 disables the cache), got '",
                   env, "'");
      cap_ = size_t(mib) << 20;
      adaptive_ = false;
    }
  }

  void* allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    const size_t size = rounded(nbytes);
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      note_outstanding_locked(size);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        auto blk = it->second.back();
        it->second.pop_back();
        void* p = blk->ptr;
        lru_.erase(blk);
        cached_ -= size;
        return p;
      }
      grow_on_miss_locked(size);
    }
    if (size >= kReleaseOnMissMin) release_for(size);
    void* p = std::aligned_alloc(64, size);
    if (!p) {  // memory pressure: give the cache back and retry once
      empty_cache();
      p = std::aligned_alloc(64, size);
    }
    if (!p) {
      if (size >= kCacheMin) {
        std::lock_guard<std::mutex> lock(mutex_);
        outstanding_ -= size;
      }
      MINIDL_FAIL("out of CPU memory allocating ", nbytes, " bytes");
    }
    return p;
  }
  void deallocate(void* p, size_t nbytes, Device) override {
    const size_t size = rounded(nbytes);
    if (size >= kCacheMin) {
      std::vector<void*> evicted;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        outstanding_ -= size;
        if (size <= cap_) {
          lru_.push_back({p, size});
          free_[size].push_back(std::prev(lru_.end()));
          cached_ += size;
          trim_locked(cap_, evicted, /*remember=*/adaptive_);
          p = nullptr;
        } else if (adaptive_) {
          remember_evicted_locked(size);  // too large for the cap: evicted at once
        }
      }
      for (void* q : evicted) std::free(q);
    }
    std::free(p);
  }
  void empty_cache() override { trim(0); }
  int64_t cached_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(cached_);
  }
  void set_cap(size_t cap) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cap_ = cap;
      adaptive_ = false;
      evicted_sizes_.clear();
    }
    trim(cap);
  }
  void reset_cap() {
    const size_t cap = default_cap();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cap_ = cap;
      adaptive_ = true;
      evicted_sizes_.clear();
    }
    trim(cap);
  }
  size_t cap() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cap_;
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
  };
  using BlockIt = std::list<Block>::iterator;
  static constexpr size_t kCacheMin = size_t(1) << 20;
  // Misses at least this large release cached small blocks first. They are rare (an
  // evaluation batch, a long sequence) and fresh memory of this size page-faults anyway (glibc
  // mmaps it); smaller misses happen every step while the previous step's outputs are still
  // alive, and releasing there made every step re-fault its activations (2.5x the faults).
  static constexpr size_t kReleaseOnMissMin = size_t(32) << 20;
  static size_t rounded(size_t n) {
    return n >= kCacheMin ? (n + 4095) / 4096 * 4096 : (n + 63) / 64 * 64;
  }
  // How many evicted sizes the adaptive cap remembers (the most recent ones).
  static constexpr size_t kEvictedSizesKept = 256;
  static size_t physical_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
  }
  // min(kDefaultCpuCacheCap, physical memory / 16)
  static size_t default_cap() {
    size_t cap = size_t(kDefaultCpuCacheCap);
    if (const size_t phys = physical_memory()) cap = std::min(cap, phys / 16);
    return cap;
  }
  // Large-block bytes handed out and not yet returned, and their peak.
  void note_outstanding_locked(size_t size) {
    outstanding_ += size;
    peak_outstanding_ = std::max(peak_outstanding_, outstanding_);
  }
  // A miss of a size the cap evicted recently: the cache thrashes (blocks leave before their
  // size recurs), so the cap grows by it, bounded by the peak of outstanding large blocks (the
  // cache never holds more than the program once used) and 1/4 of physical memory.
  void grow_on_miss_locked(size_t size) {
    if (!adaptive_) return;
    auto it = std::find(evicted_sizes_.rbegin(), evicted_sizes_.rend(), size);
    if (it == evicted_sizes_.rend()) return;
    evicted_sizes_.erase(std::next(it).base());
    const size_t limit = std::min(std::max(peak_outstanding_, default_cap_), max_cap_);
    cap_ = std::max(cap_, std::min(cap_ + std::max(size, cap_ / 4), limit));
  }
  // Unlinks the least recently freed blocks until at most `limit` bytes stay cached;
  // `remember`: their sizes go to evicted_sizes_ (evictions by the cap).
  void trim_locked(size_t limit, std::vector<void*>& evicted, bool remember = false) {
    while (cached_ > limit && !lru_.empty()) {
      const Block b = lru_.front();
      auto& same = free_[b.size];
      same.erase(std::find(same.begin(), same.end(), lru_.begin()));  // oldest: near the front
      lru_.pop_front();
      cached_ -= b.size;
      evicted.push_back(b.ptr);
      if (remember) remember_evicted_locked(b.size);
    }
  }
  void remember_evicted_locked(size_t size) {
    if (evicted_sizes_.size() == kEvictedSizesKept) evicted_sizes_.pop_front();
    evicted_sizes_.push_back(size);
  }
  // A large miss: gives back least recently freed blocks *smaller than kReleaseOnMissMin*
  // worth `size` bytes first, so that live + cached memory does not grow by it while the cache
  // holds the blocks of a smaller workload (a training step before an evaluation batch). Large
  // blocks are left to the cap: releasing them here evicted the blocks the next evaluation
  // batch reuses (alternating sizes missed every time).
  void release_for(size_t size) {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_t freed = 0;
      for (auto it = lru_.begin(); it != lru_.end() && freed < size;) {
        if (it->size >= kReleaseOnMissMin) {
          ++it;
          continue;
        }
        auto& same = free_[it->size];
        same.erase(std::find(same.begin(), same.end(), it));
        freed += it->size;
        cached_ -= it->size;
        evicted.push_back(it->ptr);
        if (adaptive_) remember_evicted_locked(it->size);
        it = lru_.erase(it);
      }
    }
    for (void* p : evicted) std::free(p);
  }
  void trim(size_t limit) {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      trim_locked(limit, evicted);
    }
    for (void* p : evicted) std::free(p);
  }

  mutable std::mutex mutex_;
  std::list<Block> lru_;                                   // front: least recently freed
  std::unordered_map<size_t, std::vector<BlockIt>> free_;  // by size, most recent at back
  size_t cached_ = 0;
  size_t cap_;
  bool adaptive_ = true;              // the default cap, grown by grow_on_miss_locked
  std::deque<size_t> evicted_sizes_;  // sizes the cap evicted, most recent at back
  size_t outstanding_ = 0, peak_outstanding_ = 0;
  const size_t default_cap_ = default_cap();
  // The adaptive cap's ceiling: 1/4 of physical memory (none where that is unknown).
  const size_t max_cap_ = physical_memory() ? physical_memory() / 4 : SIZE_MAX;
};

// Never destroyed: tensors held in other static objects may be freed after main returns.
CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();
  return *a;
}
Allocator* g_allocators[kNumDeviceTypes] = {nullptr, nullptr};

}  // namespace

Allocator& get_allocator(DeviceType type) {
  // The CUDA allocator is installed with the CUDA kernels: a program whose first op allocates a
  // CUDA tensor (rand(..., kCUDA), pin_memory(x).to(kCUDA)) must install them first.
  if (type != DeviceType::cpu && !g_allocators[int(type)]) ensure_kernels_registered();
  Allocator* a =
      type == DeviceType::cpu && !g_allocators[0] ? &cpu_allocator() : g_allocators[int(type)];
  MINIDL_CHECK(a, "no allocator for ", device_type_name(type), " tensors: ",
               type == DeviceType::cuda ? cuda::unavailable_reason()
                                        : std::string("this build has no backend for them"));
  return *a;
}

void set_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[int(type)] = allocator;
}

void set_cpu_cache_cap(int64_t bytes) {
  MINIDL_CHECK(bytes >= 0, "set_cpu_cache_cap: expected a non-negative byte count, got ", bytes);
  cpu_allocator().set_cap(size_t(bytes));
}

void reset_cpu_cache_cap() {
  cpu_allocator().reset_cap();
}

int64_t cpu_cache_cap() {
  return int64_t(cpu_allocator().cap());
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
  MemoryStats s{c->allocated.load(std::memory_order_relaxed),
                c->peak.load(std::memory_order_relaxed), 0};
  if (Allocator* a = device.type == DeviceType::cpu && !g_allocators[0]
                         ? &cpu_allocator()
                         : g_allocators[int(device.type)])
    s.cached = a->cached_bytes();
  return s;
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
    if (data_) {
      get_allocator(device_.type).deallocate(data_, nbytes_, device_);
      count_allocation(device_, -int64_t(nbytes_));
    }
  } else if (deleter_) {
    deleter_(data_);
  }
}

void Storage::release_data() {
  MINIDL_CHECK(owned_, "Storage::release_data: only storages minidl allocated can be released");
  if (data_ == nullptr) return;
  get_allocator(device_.type).deallocate(data_, nbytes_, device_);
  count_allocation(device_, -int64_t(nbytes_));
  data_ = nullptr;
}

void Storage::restore_data() {
  MINIDL_CHECK(owned_, "Storage::restore_data: only storages minidl allocated can be restored");
  if (data_ != nullptr || nbytes_ == 0) return;
  data_ = get_allocator(device_.type).allocate(nbytes_, device_);
  count_allocation(device_, int64_t(nbytes_));
}

}  // namespace minidl
