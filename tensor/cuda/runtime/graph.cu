// CUDA graphs (torch.cuda.CUDAGraph): stream capture on the compute stream into a private
// allocator pool, instantiate, replay; random kernels captured inside read their Philox
// (seed, offset) from device slots that replay() refreshes from the generators.
#include <cuda_runtime.h>

#include <vector>

#include "tensor/cuda_api.h"
#include "tensor/cuda/runtime/allocator.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/runtime/graph_rng.cuh"

namespace minidl::cuda {

struct CUDAGraph::Impl {
  int device = -1;
  cudaStream_t stream = nullptr;
  alloc::PoolId pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool capturing = false;
  struct RngUse {
    Generator* gen;
    uint64_t* slot;     // device memory: {seed, offset base}
    uint64_t counters;  // reserved by the captured draws per replay
  };
  std::vector<RngUse> rng;
  std::vector<std::function<void()>> hooks;

  void destroy() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
    if (device >= 0) {
      if (!rng.empty() || pool != 0) (void)cudaStreamSynchronize(stream);
      for (RngUse& u : rng) (void)cudaFree(u.slot);
      if (pool != 0) alloc::release_pool(device, pool);
    }
    (void)cudaGetLastError();
    rng.clear();
    hooks.clear();
    pool = 0;
  }
};

namespace {
thread_local CUDAGraph::Impl* t_capture = nullptr;  // the graph this thread is capturing
}

PhiloxArgs reserve_philox(Generator& gen, uint64_t counters, int device) {
  CUDAGraph::Impl* g = t_capture;
  if (!g || g->device != device) {
    PhiloxStream s = gen.reserve(counters);
    return PhiloxArgs{s.seed, s.offset, nullptr};
  }
  for (auto& u : g->rng) {
    if (u.gen == &gen) {
      PhiloxArgs a{0, u.counters, u.slot};
      u.counters += counters;
      return a;
    }
  }
  uint64_t* slot = nullptr;
  MINIDL_CUDA_CHECK(cudaMalloc(&slot, 2 * sizeof(uint64_t)));  // legal in relaxed capture
  g->rng.push_back({&gen, slot, counters});
  return PhiloxArgs{0, 0, slot};
}

CUDAGraph::CUDAGraph() : impl_(std::make_unique<Impl>()) {}
CUDAGraph::~CUDAGraph() {
  if (impl_->capturing) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(impl_->stream, &g);
    if (g) (void)cudaGraphDestroy(g);
    alloc::end_allocate_to_pool(impl_->device);
    t_capture = nullptr;
  }
  impl_->destroy();
}

bool CUDAGraph::captured() const {
  return impl_->exec != nullptr;
}

void CUDAGraph::capture_begin() {
  MINIDL_CHECK(!impl_->capturing && !impl_->exec,
               "CUDAGraph::capture_begin: this graph was already captured (call reset() first)");
  MINIDL_CHECK(t_capture == nullptr, "CUDAGraph::capture_begin: this thread is already capturing");
  impl_->device = current_device();
  impl_->stream = compute_stream(impl_->device);
  MINIDL_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));  // eager work done before capture
  impl_->pool = alloc::new_pool_id();
  alloc::begin_allocate_to_pool(impl_->device, impl_->pool);
  // Relaxed: the caching allocator may cudaMalloc a new segment while capturing.
  cudaError_t err = cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    alloc::end_allocate_to_pool(impl_->device);
    MINIDL_CUDA_CHECK(err);
  }
  impl_->capturing = true;
  t_capture = impl_.get();
}

void CUDAGraph::capture_end() {
  MINIDL_CHECK(impl_->capturing, "CUDAGraph::capture_end without capture_begin");
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(impl_->stream, &g);
  alloc::end_allocate_to_pool(impl_->device);
  impl_->capturing = false;
  t_capture = nullptr;
  if (err != cudaSuccess) {
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    impl_->destroy();
    MINIDL_FAIL("CUDAGraph::capture_end: capture on cuda:", impl_->device,
                " failed: ", cudaGetErrorString(err),
                " (the captured region did something a graph cannot hold, such as a "
                "device->host copy, item(), or a synchronize)");
  }
  impl_->graph = g;
  err = cudaGraphInstantiate(&impl_->exec, g, 0);
  if (err != cudaSuccess) {  // free the graph, slots and pool: capture_begin may run again
    impl_->exec = nullptr;
    impl_->destroy();
    MINIDL_CUDA_CHECK(err);
  }
}

void CUDAGraph::replay() {
  MINIDL_CHECK(impl_->exec, "CUDAGraph::replay: nothing captured");
  DeviceGuard guard(impl_->device);
  for (auto& hook : impl_->hooks) hook();
  for (auto& u : impl_->rng) {
    PhiloxStream s = u.gen->reserve(u.counters);
    const uint64_t host[2] = {s.seed, s.offset};
    // Pageable source: staged before the call returns, ordered before the launch.
    MINIDL_CUDA_CHECK(
        cudaMemcpyAsync(u.slot, host, sizeof(host), cudaMemcpyHostToDevice, impl_->stream));
  }
  MINIDL_CUDA_CHECK(cudaGraphLaunch(impl_->exec, impl_->stream));
}

void CUDAGraph::reset() {
  MINIDL_CHECK(!impl_->capturing, "CUDAGraph::reset during capture");
  impl_->destroy();
}

void add_replay_hook(std::function<void()> fn) {
  if (t_capture) t_capture->hooks.push_back(std::move(fn));
}

bool is_capturing(int index) {
  const int d = index < 0 ? current_device() : index;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  MINIDL_CUDA_CHECK(cudaStreamIsCapturing(compute_stream(d), &st));
  return st == cudaStreamCaptureStatusActive;
}

}  // namespace minidl::cuda
