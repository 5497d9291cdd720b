// Library handles per device, created lazily and bound to the device's compute stream:
// cuBLAS, cuBLASLt (with a persistent workspace, so GEMMs are graph-capturable) and cuDNN.
// Checks for their status codes throw with the call, file:line and the library's message.
// cuBLAS and cuBLASLt are loaded on first use (tensor/cuda/blas_api.cuh), not linked.
#pragma once
#include <cstddef>

#include "tensor/cuda/blas_api.cuh"
#include "tensor/cuda/common.cuh"

#ifdef MINIDL_WITH_CUDNN
#include <cudnn.h>
#endif

namespace minidl::cuda {

namespace detail {
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);
#ifdef MINIDL_WITH_CUDNN
[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line);
#endif
}  // namespace detail

#define MINIDL_CUBLAS_CHECK(call)                                                        \
  do {                                                                                   \
    cublasStatus_t minidl_st_ = (call);                                                  \
    if (minidl_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                \
      ::minidl::cuda::detail::throw_cublas_error(minidl_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define MINIDL_CUDNN_CHECK(call)                                                        \
  do {                                                                                  \
    auto minidl_st_ = (call);                                                           \
    if (minidl_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                \
      ::minidl::cuda::detail::throw_cudnn_error(minidl_st_, #call, __FILE__, __LINE__); \
  } while (0)

// For the current device, bound to its compute stream.
cublasHandle_t cublas_handle(int device);
cublasLtHandle_t cublaslt_handle(int device);
// A workspace for cuBLASLt / cuDNN that lives as long as the process (allocated once per
// device with cudaMalloc, grown on demand outside graph capture).
void* lt_workspace(int device, size_t* nbytes);
#ifdef MINIDL_WITH_CUDNN
cudnnHandle_t cudnn_handle(int device);
#endif

}  // namespace minidl::cuda
