// Shared by every CUDA kernel file: error checks that throw with the call and file:line, the
// per-device compute stream, device guards for tensors, launch geometry, and dtype helpers.
// Only .cu files include this (no public header includes a CUDA header).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/half.h"
#include "tensor/tensor.h"

namespace minidl::cuda {

namespace detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
}  // namespace detail

// Every CUDA runtime call goes through this: "CUDA error: cudaMalloc(&p, n) failed at
// tensor/cuda/runtime/allocator.cu:120: out of memory (cudaErrorMemoryAllocation)".
#define MINIDL_CUDA_CHECK(call)                                                         \
  do {                                                                                  \
    cudaError_t minidl_err_ = (call);                                                   \
    if (minidl_err_ != cudaSuccess) [[unlikely]]                                        \
      ::minidl::cuda::detail::throw_cuda_error(minidl_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: reports bad launch configurations at the launch site.
#define MINIDL_CUDA_LAUNCH_CHECK() MINIDL_CUDA_CHECK(cudaGetLastError())

// The compute stream of a device (created lazily, non-blocking w.r.t. the legacy stream).
// Every minidl kernel, copy and library call on that device is queued here.
cudaStream_t compute_stream(int device);
inline cudaStream_t stream_of(const Tensor& t) {
  return compute_stream(t.device().index);
}

// Makes t's device current for the scope (a no-op when it already is).
class TensorDeviceGuard {
 public:
  explicit TensorDeviceGuard(const Tensor& t) : TensorDeviceGuard(t.device().index) {}
  explicit TensorDeviceGuard(int device);
  ~TensorDeviceGuard();
  TensorDeviceGuard(const TensorDeviceGuard&) = delete;
  TensorDeviceGuard& operator=(const TensorDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Properties cached per device (read once at first use).
int sm_count(int device);

// ---- launch geometry. Kernels use grid-stride loops, so the grid is capped.
inline constexpr int kBlock = 256;
inline unsigned grid_for(int64_t n, int block = kBlock) {
  int64_t blocks = (n + block - 1) / block;
  if (blocks < 1) blocks = 1;
  const int64_t cap = int64_t(1) << 20;
  return unsigned(blocks < cap ? blocks : cap);
}

// ---- element types. Half and BFloat16 (tensor/half.h) are used on the device as stored;
// arithmetic happens in opmath_t (float for both).
template <typename T>
__host__ __device__ inline opmath_t<T> to_op(T v) {
  if constexpr (is_reduced_float_v<T>)
    return float(v);
  else
    return v;
}
template <typename T, typename V>
__host__ __device__ inline T from_op(V v) {
  if constexpr (is_reduced_float_v<T>)
    return T(float(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != V(0);
  else
    return static_cast<T>(v);
}

// Tensor data pointer typed for a kernel (checks the dtype like Tensor::data_ptr<T>).
template <typename T>
T* ptr(const Tensor& t) {
  return t.data_ptr<T>();
}

}  // namespace minidl::cuda
