// Library handles per device, created lazily and bound to the device's compute stream:
// cuBLAS, cuBLASLt (with a persistent workspace, so GEMMs are graph-capturable) and cuDNN.
// Checks for their status codes throw with the call, file:line and the library's message.
// cuBLAS, cuBLASLt and cuDNN are not linked: tables of function pointers, filled on first use by
// dlopen/dlsym (tensor/cuda/runtime/dynlib.cu), so a CPU-only run never maps them. The headers give
// the types; calls go through the tables: cublaslt_api().cublasLtMatmul(...), cudnn_api().cudnnX().
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/runtime/dynlib.h"

#ifdef MINIDL_WITH_CUDNN
#include <cudnn.h>
#endif

// The functions minidl calls, by their exported names: cublas_v2.h renames cublasCreate to
// cublasCreate_v2 with an object-like macro, so callers still write cublas_api().cublasCreate(..).
#define MINIDL_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate_v2)               \
  X(cublasSetStream_v2)            \
  X(cublasSetWorkspace_v2)         \
  X(cublasGetStatusString)

#define MINIDL_CUBLASLT_FUNCTIONS(X)      \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)     \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmul)

#define MINIDL_CUDNN_FUNCTIONS(X)                   \
  X(cudnnCreate)                                    \
  X(cudnnSetStream)                                 \
  X(cudnnGetErrorString)                            \
  X(cudnnGetLastErrorString)                        \
  X(cudnnCreateTensorDescriptor)                    \
  X(cudnnSetTensor4dDescriptor)                     \
  X(cudnnCreateFilterDescriptor)                    \
  X(cudnnSetFilter4dDescriptor)                     \
  X(cudnnCreateConvolutionDescriptor)               \
  X(cudnnSetConvolution2dDescriptor)                \
  X(cudnnSetConvolutionGroupCount)                  \
  X(cudnnSetConvolutionMathType)                    \
  X(cudnnGetConvolutionForwardAlgorithm_v7)         \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)    \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)  \
  X(cudnnFindConvolutionForwardAlgorithmEx)         \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx)    \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx)  \
  X(cudnnGetConvolutionForwardWorkspaceSize)        \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)   \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
  X(cudnnConvolutionForward)                        \
  X(cudnnConvolutionBackwardData)                   \
  X(cudnnConvolutionBackwardFilter)

namespace minidl::cuda {

#define MINIDL_BLAS_API_MEMBER(name) decltype(&::name) name = nullptr;
struct CublasApi {
  MINIDL_CUBLAS_FUNCTIONS(MINIDL_BLAS_API_MEMBER)
};
struct CublasLtApi {
  MINIDL_CUBLASLT_FUNCTIONS(MINIDL_BLAS_API_MEMBER)
};
#ifdef MINIDL_WITH_CUDNN
struct CudnnApi {
  MINIDL_CUDNN_FUNCTIONS(MINIDL_BLAS_API_MEMBER)
};
#endif
#undef MINIDL_BLAS_API_MEMBER

// Loaded on the first call (thread-safe); throws an Error naming the library or symbol that is
// missing and dlerror()'s text, and tries again on the next call.
const CublasApi& cublas_api();
const CublasLtApi& cublaslt_api();
#ifdef MINIDL_WITH_CUDNN
const CudnnApi& cudnn_api();  // cuDNN (libcudnn.so.<CUDNN_MAJOR>), also dlopen'ed on first use
#endif

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
