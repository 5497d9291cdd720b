// CUDA runtime basics for the foundation: device_count() that is 0 without a driver/GPU,
// and a smoke kernel proving the CUDA toolchain path (the full backend is its own issue).
#include <cuda_runtime.h>

#include <string>

#include "tensor/cuda/runtime.h"
#include "tensor/dispatch.h"
#include "tensor/error.h"

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

void register_cuda_kernels() {}  // kernels arrive with the CUDA backend issue

namespace cuda {
namespace {
__global__ void iota_kernel(float* out, int n, float start) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = start + float(i);
}
void check(cudaError_t err, const char* call) {
  MINIDL_CHECK(err == cudaSuccess, "CUDA call ", call, " failed: ", cudaGetErrorString(err));
}
}  // namespace

std::vector<float> smoke_iota(int n, float start) {
  MINIDL_CHECK(cuda_device_count_impl() > 0, "smoke_iota: no CUDA device");
  float* d = nullptr;
  check(cudaMalloc(&d, sizeof(float) * size_t(n)), "cudaMalloc");
  iota_kernel<<<(n + 255) / 256, 256>>>(d, n, start);
  check(cudaGetLastError(), "iota_kernel launch");
  std::vector<float> h(static_cast<size_t>(n));
  check(cudaMemcpy(h.data(), d, sizeof(float) * size_t(n), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaFree(d), "cudaFree");
  return h;
}

void* host_alloc_pinned(size_t nbytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, nbytes == 0 ? 1 : nbytes, cudaHostAllocDefault), "cudaHostAlloc");
  return p;
}

void host_free_pinned(void* ptr) {
  if (ptr) (void)cudaFreeHost(ptr);  // runs in destructors: never throws
}

bool is_pinned_host_ptr(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // pageable memory on old runtimes reports an error
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace cuda
}  // namespace minidl
