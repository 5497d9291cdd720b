// CUDA runtime: device count (0 without a driver), current device and guards, properties,
// one compute stream per device, error reporting, host<->device copies and the TF32 switch
// (the kernels' registration is in tensor/cuda/register.cu).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_api.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/runtime/device.h"
#include "tensor/dispatch.h"

namespace minidl {

int cuda_device_count_impl() {
  static const int count = [] {
    int n = 0;  // cudaGetDeviceCount leaves n untouched on error (35: no driver)
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky error state
      return 0;
    }
    return n;
  }();
  return count;
}

namespace cuda {

namespace detail {
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
  // No usable driver or device: say so as PyTorch does, not as a runtime error code.
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
      err == cudaErrorStubLibrary) {
    const std::string reason = unavailable_reason();
    if (!reason.empty())
      MINIDL_FAIL(reason, " (", call, " returned ", cudaGetErrorName(err),
                  "). Check with minidl::cuda::is_available(), or use the CPU.");
  }
  MINIDL_FAIL("CUDA error: ", call, " failed at ", file, ":", line, ": ", cudaGetErrorString(err),
              " (", cudaGetErrorName(err), ")");
}
}  // namespace detail

namespace {
constexpr int kMaxDevices = 64;

void check_index(int index, const char* what) {
  const int n = cuda_device_count_impl();
  if (n == 0) MINIDL_FAIL(what, ": ", unavailable_reason());
  MINIDL_CHECK(index >= 0 && index < n, what, ": CUDA device ", index, " does not exist (", n,
               " device", n == 1 ? "" : "s", " visible)");
}

struct StreamSlot {
  std::once_flag once;
  cudaStream_t stream = nullptr;
};
StreamSlot g_streams[kMaxDevices];

struct PropsSlot {
  std::once_flag once;
  int sm_count = 0;
};
PropsSlot g_props[kMaxDevices];

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_cudnn_deterministic{false};
std::atomic<bool> g_cudnn_benchmark{false};
}  // namespace

bool is_built() {
  return true;
}
int device_count() {
  return cuda_device_count_impl();
}

std::string unavailable_reason() {
  if (cuda_device_count_impl() > 0) return "";
  const std::string head = "CUDA is not available on this machine (";
  const std::string tail = "): minidl found no usable NVIDIA GPU";
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaGetLastError();
  auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  if (driver == 0) return head + "no NVIDIA driver found" + tail;
  if (driver < runtime)
    return head + "the NVIDIA driver supports CUDA " + version(driver) + "; this minidl needs " +
           version(runtime) + tail;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr)
    return head + "no CUDA device visible; CUDA_VISIBLE_DEVICES is \"" + visible + "\"" + tail;
  return head + "no CUDA device found" + tail;
}

int current_device() {
  int d = 0;
  MINIDL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_index(index, "set_device");
  MINIDL_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) {
  check_index(index, "DeviceGuard");
  previous_ = current_device();
  if (previous_ != index) MINIDL_CUDA_CHECK(cudaSetDevice(index));
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

TensorDeviceGuard::TensorDeviceGuard(int device) {
  int cur = 0;
  MINIDL_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) {
    check_index(device, "TensorDeviceGuard");
    MINIDL_CUDA_CHECK(cudaSetDevice(device));
    previous_ = cur;
  }
}
TensorDeviceGuard::~TensorDeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

DeviceProperties get_device_properties(int index) {
  check_index(index, "get_device_properties");
  cudaDeviceProp p{};
  MINIDL_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceProperties r;
  r.name = p.name;
  r.major = p.major;
  r.minor = p.minor;
  r.multi_processor_count = p.multiProcessorCount;
  r.total_memory = int64_t(p.totalGlobalMem);
  r.l2_cache_size = p.l2CacheSize;
  r.max_threads_per_block = p.maxThreadsPerBlock;
  MINIDL_CUDA_CHECK(cudaDriverGetVersion(&r.driver_version));
  MINIDL_CUDA_CHECK(cudaRuntimeGetVersion(&r.runtime_version));
  return r;
}

int sm_count(int device) {
  check_index(device, "sm_count");
  PropsSlot& s = g_props[device];
  std::call_once(s.once, [&] {
    MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, device));
  });
  return s.sm_count;
}

cudaStream_t compute_stream(int device) {
  MINIDL_CHECK(device >= 0 && device < kMaxDevices, "compute_stream: bad device ", device);
  StreamSlot& s = g_streams[device];
  std::call_once(s.once, [&] {
    check_index(device, "compute_stream");
    DeviceGuard guard(device);
    // Non-blocking: the legacy default stream (used by other libraries) does not serialise
    // with it; CUDA graph capture needs a non-default stream anyway.
    MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  });
  return s.stream;
}

void* current_stream(int index) {
  return compute_stream(index < 0 ? current_device() : index);
}

void synchronize(int index) {
  const int d = index < 0 ? current_device() : index;
  DeviceGuard guard(d);
  MINIDL_CUDA_CHECK(cudaStreamSynchronize(compute_stream(d)));
}

void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow);
}
bool allow_tf32() {
  return g_allow_tf32.load();
}
void set_cudnn_deterministic(bool deterministic) {
  g_cudnn_deterministic.store(deterministic);
}
bool cudnn_deterministic() {
  return g_cudnn_deterministic.load();
}
void set_cudnn_benchmark(bool benchmark) {
  g_cudnn_benchmark.store(benchmark);
}
bool cudnn_benchmark() {
  return g_cudnn_benchmark.load();
}

// ---- host <-> device copies. src and dst: same shape and dtype, both contiguous.
namespace {
// Pinned sources of in-flight async host->device copies stay alive until their event fires.
struct PendingCopy {
  cudaEvent_t done;
  std::shared_ptr<Storage> keep;
};
// Never destroyed: at exit, destroying the last unreaped copies' storages would run
// host_free_pinned on the pinned allocator's state, which is defined later in this file and so
// destroyed first (and the CUDA runtime may be gone by then).
std::mutex& g_pending_mutex = *new std::mutex;
std::vector<PendingCopy>& g_pending = *new std::vector<PendingCopy>;

// Destroys an event on scope exit (error paths included) unless released.
struct OwnedEvent {
  cudaEvent_t ev = nullptr;
  ~OwnedEvent() {
    if (ev) (void)cudaEventDestroy(ev);
  }
};

void reap_pending() {
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  for (size_t i = 0; i < g_pending.size();) {
    if (cudaEventQuery(g_pending[i].done) == cudaSuccess) {
      (void)cudaEventDestroy(g_pending[i].done);
      g_pending[i] = std::move(g_pending.back());
      g_pending.pop_back();
    } else {
      (void)cudaGetLastError();  // cudaErrorNotReady is not an error here
      ++i;
    }
  }
}
}  // namespace

void cross_device_copy_impl(const Tensor& src, Tensor& dst) {
  MINIDL_CHECK(src.is_contiguous() && dst.is_contiguous() && src.dtype() == dst.dtype() &&
                   src.numel() == dst.numel(),
               "internal: cross-device copy needs contiguous tensors of one dtype and size");
  const size_t nbytes = dst.nbytes();
  if (nbytes == 0) return;
  reap_pending();
  if (src.is_cpu() && dst.is_cuda()) {
    TensorDeviceGuard guard(dst);
    cudaStream_t s = stream_of(dst);
    MINIDL_CUDA_CHECK(
        cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyHostToDevice, s));
    // Pageable sources are staged before cudaMemcpyAsync returns; pinned ones are read by
    // the DMA engine later, so their storage lives until the copy is done.
    if (is_pinned_host_ptr(src.data_ptr())) {
      OwnedEvent ev;
      MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&ev.ev, cudaEventDisableTiming));
      MINIDL_CUDA_CHECK(cudaEventRecord(ev.ev, s));
      std::lock_guard<std::mutex> lock(g_pending_mutex);
      g_pending.push_back({ev.ev, src.storage()});
      ev.ev = nullptr;  // owned by g_pending now
    }
  } else if (src.is_cuda() && dst.is_cpu()) {
    TensorDeviceGuard guard(src);
    cudaStream_t s = stream_of(src);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MINIDL_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    MINIDL_CHECK(capture == cudaStreamCaptureStatusNone, "cannot copy a CUDA tensor of shape ",
                 src.shape_str(), " on ", src.device(),
                 " to the host while a CUDA graph is being captured (item(), tolist(), .cpu() "
                 "and printing need the value now; a graph only replays device work): move the "
                 "read out of the captured region");
    MINIDL_CUDA_CHECK(
        cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDeviceToHost, s));
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(s));  // the host reads dst next
  } else if (src.is_cuda() && dst.is_cuda()) {
    // Different GPUs: order after src's queued work, copy on dst's stream, then wait so
    // neither block is reused while the copy runs.
    OwnedEvent ready;  // destroyed on every path
    {
      TensorDeviceGuard guard(src);
      MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&ready.ev, cudaEventDisableTiming));
      MINIDL_CUDA_CHECK(cudaEventRecord(ready.ev, stream_of(src)));
    }
    TensorDeviceGuard guard(dst);
    cudaStream_t s = stream_of(dst);
    MINIDL_CUDA_CHECK(cudaStreamWaitEvent(s, ready.ev, 0));
    MINIDL_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), dst.device().index, src.data_ptr(),
                                          src.device().index, nbytes, s));
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(s));
  } else {
    MINIDL_FAIL("internal: cross-device copy from ", src.device(), " to ", dst.device());
  }
}

// ---- foundation helpers (smoke kernel, pinned host memory)
namespace {
__global__ void iota_kernel(float* out, int n, float start) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = start + float(i);
}
}  // namespace

std::vector<float> smoke_iota(int n, float start) {
  MINIDL_CHECK(cuda_device_count_impl() > 0, "smoke_iota: no CUDA device");
  MINIDL_CHECK(n >= 0, "smoke_iota: negative size ", n);
  std::vector<float> h(static_cast<size_t>(n));
  if (n == 0) return h;  // a launch of 0 blocks is an error
  float* d = nullptr;
  MINIDL_CUDA_CHECK(cudaMalloc(&d, sizeof(float) * size_t(n)));
  iota_kernel<<<(n + 255) / 256, 256>>>(d, n, start);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess)
    err = cudaMemcpy(h.data(), d, sizeof(float) * size_t(n), cudaMemcpyDeviceToHost);
  (void)cudaFree(d);  // freed on the error path too
  MINIDL_CUDA_CHECK(err);
  return h;
}

// Caching pinned host allocator (as PyTorch's CachingHostAllocator): blocks are rounded up to
// a power of two (>= 4 KiB) and kept for reuse when freed, since cudaHostAlloc is slow and
// cudaFreeHost synchronises the device. A block is freed only once no copy reads it: the
// host->device copy holds the source storage until its event fires (cross_device_copy_impl).
namespace {
// Never destroyed (as the device allocator): pinned tensors held by static objects are freed
// after main returns.
std::mutex& g_host_mutex = *new std::mutex;
auto& g_host_sizes = *new std::unordered_map<void*, size_t>;  // every block we allocated
auto& g_host_free = *new std::unordered_map<size_t, std::vector<void*>>;  // cached blocks by size

size_t host_block_size(size_t nbytes) {
  size_t size = 4096;
  while (size < nbytes) size *= 2;
  return size;
}
}  // namespace

void* host_alloc_pinned(size_t nbytes) {
  const size_t size = host_block_size(nbytes);
  {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    auto it = g_host_free.find(size);
    if (it != g_host_free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {  // give the cached blocks back and retry once
    (void)cudaGetLastError();
    release_cached_pinned();
    err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
  }
  MINIDL_CUDA_CHECK(err);
  std::lock_guard<std::mutex> lock(g_host_mutex);
  g_host_sizes[p] = size;
  return p;
}

void host_free_pinned(void* ptr) {  // runs in destructors: never throws
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto it = g_host_sizes.find(ptr);
  if (it == g_host_sizes.end()) {
    (void)cudaFreeHost(ptr);
    return;
  }
  g_host_free[it->second].push_back(ptr);
}

void release_cached_pinned() {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  for (auto& [size, blocks] : g_host_free) {
    for (void* p : blocks) {
      (void)cudaFreeHost(p);
      g_host_sizes.erase(p);
    }
    blocks.clear();
  }
}

bool is_pinned_host_ptr(const void* ptr) {
  if (cuda_device_count_impl() == 0) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // pageable memory on old runtimes reports an error
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace cuda
}  // namespace minidl
