// The CUDA caching allocator (PyTorch's design): cudaMalloc'd segments are split into blocks,
// freed blocks are cached per (pool, stream) in size-ordered bins and reused best-fit, merged
// with free neighbours, so a steady training loop never calls cudaMalloc/cudaFree. Blocks used
// on another stream (record_stream) wait for events before reuse. CUDA graphs get private pools.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_api.h"
#include "tensor/cuda/runtime/allocator.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/runtime/device.h"
#include "tensor/storage.h"

namespace minidl::cuda {
namespace {

constexpr size_t kMinBlock = 512;               // every size is rounded to this
constexpr size_t kSmallSize = size_t(1) << 20;  // requests up to 1 MiB use the small bins
constexpr size_t kSmallSegment = size_t(2) << 20;
constexpr size_t kLargeSegment = size_t(20) << 20;  // for requests of 1-10 MiB
constexpr size_t kMinLargeAlloc = size_t(10) << 20;
constexpr size_t kRoundLarge = size_t(2) << 20;
constexpr int kMaxDevices = 64;

struct Block {
  int device = 0;
  cudaStream_t stream = nullptr;
  alloc::PoolId pool = 0;
  size_t size = 0;
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;
  bool held = false;      // freed during a capture but older than it: kept until the graph goes
  int event_count = 0;    // outstanding record_stream events
  Block* prev = nullptr;  // neighbours inside one segment
  Block* next = nullptr;
  std::vector<cudaStream_t> stream_uses;
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
  }
};
using BlockSet = std::set<Block*, BlockLess>;

struct Pool {
  BlockSet small, large;
  int64_t reserved = 0;
  bool released = false;  // the owning graph is gone
};

size_t round_size(size_t n) {
  return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock;
}
size_t segment_size(size_t n) {
  if (n <= kSmallSize) return kSmallSegment;
  if (n < kMinLargeAlloc) return kLargeSegment;
  return (n + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}
bool should_split(const Block* b, size_t n) {
  const size_t rest = b->size - n;
  return b->small ? rest >= kMinBlock : rest > kSmallSize;
}

class DeviceAllocator {
 public:
  void* allocate(size_t nbytes, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    const size_t size = round_size(nbytes);
    const bool small = size <= kSmallSize;
    cudaStream_t stream = compute_stream(device);
    Pool& pool = pools_[capture_pool_];
    BlockSet& bins = small ? pool.small : pool.large;
    Block key;
    key.stream = stream;
    key.size = size;
    Block* block = nullptr;
    auto it = bins.lower_bound(&key);
    if (it != bins.end() && (*it)->stream == stream) {
      block = *it;
      bins.erase(it);
      ++stats_.num_cache_hits;
    } else {
      block = new_segment(device, stream, size, small);
    }
    if (should_split(block, size)) {
      Block* rest = new Block(*block);
      rest->stream_uses.clear();
      rest->ptr = block->ptr + size;
      rest->size = block->size - size;
      rest->prev = block;
      rest->next = block->next;
      if (rest->next) rest->next->prev = rest;
      block->next = rest;
      block->size = size;
      bins.insert(rest);
    }
    block->allocated = true;
    live_[block->ptr] = block;
    ++stats_.num_allocs;
    stats_.allocated += int64_t(block->size);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    return block->ptr;
  }

  void deallocate(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours (cannot happen through Storage)
    Block* block = it->second;
    live_.erase(it);
    block->allocated = false;
    stats_.allocated -= int64_t(block->size);
    if (capturing() && block->pool != capture_pool_) {
      // The graph being captured may have read this block: eager code must not reuse it
      // while the graph can replay.
      block->held = true;
      held_[capture_pool_].push_back(block);
      return;
    }
    if (!block->stream_uses.empty() && !capturing()) {
      // Used on other streams: reusable once the work queued there so far has finished. The
      // events must be created on the block's device (the streams' device), whichever is current.
      int current = -1;
      if (cudaGetDevice(&current) != cudaSuccess) (void)cudaGetLastError();
      if (current != block->device) (void)cudaSetDevice(block->device);
      for (cudaStream_t s : block->stream_uses) {
        cudaEvent_t ev;
        if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventRecord(ev, s) != cudaSuccess) {
          (void)cudaGetLastError();
          (void)cudaDeviceSynchronize();  // fall back to a full wait rather than a race
          continue;
        }
        ++block->event_count;
        events_.push_back({ev, block});
      }
      block->stream_uses.clear();
      if (current >= 0 && current != block->device) (void)cudaSetDevice(current);
      if (block->event_count > 0) return;
    }
    free_block(block);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // external memory (from_blob): its owner manages lifetime
    if (stream != it->second->stream) it->second->stream_uses.push_back(stream);
  }

  // Frees every segment that is entirely free (default pool and released graph pools).
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capturing()) return;  // cudaFree is illegal during capture
    process_events();
    for (auto& [id, pool] : pools_) {
      if (id != 0 && !pool.released) continue;
      release_free_segments(pool);
    }
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated = stats_.allocated;
    stats_.peak_reserved = stats_.reserved;
  }

  void begin_pool(alloc::PoolId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    MINIDL_CHECK(capture_pool_ == 0,
                 "CUDA graph capture: another capture is active on this device");
    capture_pool_ = id;
    pools_[id].released = false;
  }
  void end_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    capture_pool_ = 0;
  }
  void release_pool(alloc::PoolId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    it->second.released = true;
    for (Block* b : held_[id]) {
      b->held = false;
      free_block(b);
    }
    held_.erase(id);
    if (!capturing()) release_free_segments(it->second);
  }
  int64_t pool_reserved(alloc::PoolId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(id);
    return it == pools_.end() ? 0 : it->second.reserved;
  }

 private:
  bool capturing() const { return capture_pool_ != 0; }

  Block* new_segment(int device, cudaStream_t stream, size_t size, bool small) {
    const size_t seg = segment_size(size);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, seg);
    if (err == cudaErrorMemoryAllocation && !capturing()) {
      (void)cudaGetLastError();
      for (auto& [id, pool] : pools_)
        if (id == 0 || pool.released) release_free_segments(pool);
      err = cudaMalloc(&p, seg);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      ++stats_.num_ooms;
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      (void)cudaGetLastError();
      MINIDL_FAIL("CUDA out of memory: tried to allocate ", size, " bytes (segment ", seg,
                  ") on cuda:", device, "; ", stats_.allocated, " bytes allocated by minidl, ",
                  stats_.reserved, " reserved, ", free_b, " free of ", total_b, " on the device (",
                  cudaGetErrorString(err), ")");
    }
    ++stats_.num_device_allocs;
    stats_.reserved += int64_t(seg);
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    pools_[capture_pool_].reserved += int64_t(seg);
    Block* b = new Block();
    b->device = device;
    b->stream = stream;
    b->pool = capture_pool_;
    b->size = seg;
    b->ptr = static_cast<char*>(p);
    b->small = small;
    return b;
  }

  void free_block(Block* block) {
    Pool& pool = pools_[block->pool];
    BlockSet& bins = block->small ? pool.small : pool.large;
    for (Block* nb : {block->prev, block->next}) {
      if (!nb || nb->allocated || nb->held || nb->event_count > 0) continue;
      bins.erase(nb);
      if (nb == block->prev) {
        block->ptr = nb->ptr;
        block->prev = nb->prev;
        if (block->prev) block->prev->next = block;
      } else {
        block->next = nb->next;
        if (block->next) block->next->prev = block;
      }
      block->size += nb->size;
      delete nb;
    }
    if (pool.released && !capturing() && !block->prev && !block->next) {
      release_segment(pool, block);
      return;
    }
    bins.insert(block);
  }

  void release_segment(Pool& pool, Block* block) {
    (void)cudaFree(block->ptr);
    (void)cudaGetLastError();
    ++stats_.num_device_frees;
    stats_.reserved -= int64_t(block->size);
    pool.reserved -= int64_t(block->size);
    delete block;
  }

  void release_free_segments(Pool& pool) {
    for (BlockSet* bins : {&pool.small, &pool.large}) {
      for (auto it = bins->begin(); it != bins->end();) {
        Block* b = *it;
        if (!b->prev && !b->next) {
          it = bins->erase(it);
          release_segment(pool, b);
        } else {
          ++it;
        }
      }
    }
  }

  void process_events() {
    if (capturing()) return;  // event queries are illegal on capturing streams
    while (!events_.empty()) {
      auto [ev, block] = events_.front();
      cudaError_t st = cudaEventQuery(ev);
      if (st == cudaErrorNotReady) {
        (void)cudaGetLastError();
        break;
      }
      (void)cudaEventDestroy(ev);
      events_.pop_front();
      if (--block->event_count == 0) free_block(block);
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block*> live_;
  std::map<alloc::PoolId, Pool> pools_;
  alloc::PoolId capture_pool_ = 0;
  std::deque<std::pair<cudaEvent_t, Block*>> events_;
  std::map<alloc::PoolId, std::vector<Block*>> held_;
  AllocatorStats stats_;
};

DeviceAllocator* g_devices[kMaxDevices] = {};
std::once_flag g_device_once[kMaxDevices];

DeviceAllocator& device_allocator(int device) {
  MINIDL_CHECK(device >= 0 && device < kMaxDevices, "CUDA allocator: bad device index ", device);
  // Never destroyed: tensors in static objects may be freed after main returns.
  std::call_once(g_device_once[device], [&] { g_devices[device] = new DeviceAllocator(); });
  return *g_devices[device];
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    if (nbytes == 0) return nullptr;
    TensorDeviceGuard guard(device.index);
    return device_allocator(device.index).allocate(nbytes, device.index);
  }
  void deallocate(void* ptr, size_t, Device device) override {
    if (!ptr) return;
    device_allocator(device.index).deallocate(ptr);
  }
  void empty_cache() override { cuda::empty_cache(); }
};

std::atomic<alloc::PoolId> g_next_pool{1};

}  // namespace

void install_allocator() {
  static CudaAllocator* a = new CudaAllocator();
  set_allocator(DeviceType::cuda, a);
}

AllocatorStats memory_stats(int index) {
  if (index < 0 || index >= device_count()) return {};
  return device_allocator(index).stats();
}
void reset_peak_memory_stats(int index) {
  if (index < 0 || index >= device_count()) return;
  device_allocator(index).reset_peak();
}
void empty_cache() {
  for (int d = 0; d < device_count() && d < kMaxDevices; ++d) {
    DeviceGuard guard(d);
    device_allocator(d).empty_cache();
  }
  if (device_count() > 0 && !is_capturing()) release_cached_pinned();  // cudaFreeHost syncs
}
void record_stream(void* ptr, void* stream) {
  int device = 0;
  cudaPointerAttributes attr{};
  MINIDL_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  device = attr.device;
  device_allocator(device).record_stream(ptr, static_cast<cudaStream_t>(stream));
}

namespace alloc {
PoolId new_pool_id() {
  return g_next_pool.fetch_add(1);
}
void begin_allocate_to_pool(int device, PoolId pool) {
  device_allocator(device).begin_pool(pool);
}
void end_allocate_to_pool(int device) {
  device_allocator(device).end_pool();
}
void release_pool(int device, PoolId pool) {
  device_allocator(device).release_pool(pool);
}
int64_t pool_reserved_bytes(int device, PoolId pool) {
  return device_allocator(device).pool_reserved(pool);
}
}  // namespace alloc

}  // namespace minidl::cuda
