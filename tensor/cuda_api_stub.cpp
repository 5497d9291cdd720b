// minidl::cuda API in builds without the CUDA backend: queries report no devices, actions
// throw "built without CUDA" (the real implementation is in tensor/cuda/*.cu).
#include "tensor/cuda_api.h"

#include "tensor/error.h"

#ifndef MINIDL_WITH_CUDA
namespace minidl::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  MINIDL_FAIL(what,
              ": minidl was built without CUDA (configure with nvcc available and "
              "-DMINIDL_CUDA=ON)");
}
}  // namespace

bool is_built() {
  return false;
}
int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return "minidl was built without CUDA (configure with nvcc available and -DMINIDL_CUDA=ON)";
}
int current_device() {
  no_cuda("cuda::current_device");
}
void set_device(int) {
  no_cuda("cuda::set_device");
}
DeviceGuard::DeviceGuard(int) {
  no_cuda("cuda::DeviceGuard");
}
DeviceGuard::~DeviceGuard() = default;
DeviceProperties get_device_properties(int) {
  no_cuda("cuda::get_device_properties");
}
void synchronize(int) {
  no_cuda("cuda::synchronize");
}
void* current_stream(int) {
  no_cuda("cuda::current_stream");
}
AllocatorStats memory_stats(int) {
  return {};
}
void reset_peak_memory_stats(int) {}
void empty_cache() {}
void record_stream(void*, void*) {
  no_cuda("cuda::record_stream");
}
void set_allow_tf32(bool) {}
bool allow_tf32() {
  return false;
}
void set_cudnn_deterministic(bool) {}
bool cudnn_deterministic() {
  return false;
}
void set_cudnn_benchmark(bool) {}
bool cudnn_benchmark() {
  return false;
}
struct CUDAGraph::Impl {};
CUDAGraph::CUDAGraph() {
  no_cuda("cuda::CUDAGraph");
}
CUDAGraph::~CUDAGraph() = default;
void CUDAGraph::capture_begin() {
  no_cuda("CUDAGraph::capture_begin");
}
void CUDAGraph::capture_end() {
  no_cuda("CUDAGraph::capture_end");
}
void CUDAGraph::replay() {
  no_cuda("CUDAGraph::replay");
}
void CUDAGraph::reset() {}
bool CUDAGraph::captured() const {
  return false;
}
void add_replay_hook(std::function<void()>) {}
bool is_capturing(int) {
  return false;
}
}  // namespace minidl::cuda
#endif
