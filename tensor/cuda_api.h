// The CUDA runtime API users see (torch.cuda.*): devices, the compute stream, the caching
// allocator's statistics, TF32, and CUDA graphs. No CUDA header here; in a build without CUDA
// every query reports 0 devices and every action throws "built without CUDA".
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tensor/device.h"

namespace minidl {
class Generator;
}

namespace minidl::cuda {

bool is_built();     // compiled with the CUDA backend
int device_count();  // 0 without a driver or GPU; never throws
inline bool is_available() {
  return device_count() > 0;
}
// Why CUDA cannot be used here, as one line for error messages ("" when it can): "CUDA is not
// available on this machine (no NVIDIA driver found): ...", "... (the NVIDIA driver supports
// CUDA 12.2; this minidl needs 13.0): ...", "... (no CUDA device visible; CUDA_VISIBLE_DEVICES
// is \"\"): ...", or "minidl was built without CUDA: ...". Never throws.
std::string unavailable_reason();

int current_device();
void set_device(int index);  // throws naming the index and device_count()

// Makes `index` current for the scope, restores the previous device (torch.cuda.device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(Device device) : DeviceGuard(device.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multi_processor_count = 0;
  int64_t total_memory = 0;  // bytes
  int64_t l2_cache_size = 0;
  int max_threads_per_block = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // e.g. 13000
};
DeviceProperties get_device_properties(int index = 0);

// Waits for all work queued on the device's compute stream (torch.cuda.synchronize).
void synchronize(int index = -1);  // -1: current device

// The device's compute stream as an opaque cudaStream_t (every minidl kernel runs on it).
void* current_stream(int index = -1);

// ---- caching allocator (torch.cuda.memory_*)
struct AllocatorStats {
  int64_t allocated = 0;       // bytes in live tensors (rounded block sizes)
  int64_t reserved = 0;        // bytes obtained with cudaMalloc and not yet released
  int64_t peak_allocated = 0;  // since the last reset_peak_memory_stats
  int64_t peak_reserved = 0;
  int64_t num_device_allocs = 0;  // cudaMalloc calls
  int64_t num_device_frees = 0;   // cudaFree calls
  int64_t num_allocs = 0;         // allocate() calls served
  int64_t num_cache_hits = 0;     // allocate() calls served from cached blocks
  int64_t num_ooms = 0;
};
AllocatorStats memory_stats(int index = 0);
void reset_peak_memory_stats(int index = 0);
// Releases cached blocks that are entirely free back to the driver.
void empty_cache();
// Marks that the memory at `ptr` (a live allocation) is used by `stream` (cudaStream_t): its
// block is not reused until work queued there so far has finished (Tensor.record_stream).
void record_stream(void* ptr, void* stream);

// ---- math mode: TF32 tensor cores for f32 matmul and convolution (default off, like
// torch.backends.cuda.matmul.allow_tf32 = False).
void set_allow_tf32(bool allow);
bool allow_tf32();
// Convolutions use only cuDNN algorithms that give bitwise-reproducible results (default off,
// like torch.backends.cudnn.deterministic = False: the fastest algorithm may use atomics).
void set_cudnn_deterministic(bool deterministic);
bool cudnn_deterministic();
// Convolutions time cuDNN's algorithms once per shape (cudnnFind) and keep the fastest (default
// off, like torch.backends.cudnn.benchmark = False: cuDNN's heuristics choose). The timed choice
// can differ between runs, and in f32 it may be an FFT or Winograd algorithm whose rounding
// differs from a direct convolution's.
void set_cudnn_benchmark(bool benchmark);
bool cudnn_benchmark();

// ---- CUDA graphs (torch.cuda.CUDAGraph): capture the work queued on the current device's
// compute stream between capture_begin and capture_end, then replay it. Allocations made
// during capture come from a pool private to the graph and stay valid while the graph
// lives; tensors created during capture are the graph's static outputs. Random kernels
// (dropout, ...) draw new numbers on every replay: the generator's offset advances by the
// captured amount each time, as in eager mode.
class CUDAGraph {
 public:
  CUDAGraph();
  ~CUDAGraph();
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  void capture_begin();
  void capture_end();
  void replay();
  void reset();  // frees the graph and its private pool
  bool captured() const;

  struct Impl;  // implementation detail (tensor/cuda/runtime/graph.cu)

 private:
  std::unique_ptr<Impl> impl_;
};

// Registers fn to run on the host before every replay of the graph this thread is capturing
// (e.g. an optimizer uploading its current learning rate into device memory the captured
// kernels read). Does nothing when the thread is not capturing.
void add_replay_hook(std::function<void()> fn);

// Whether the calling thread is capturing a graph on `index`'s compute stream.
bool is_capturing(int index = -1);

}  // namespace minidl::cuda
