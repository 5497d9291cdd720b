// cuBLAS and cuBLASLt through tables of function pointers that are filled on first use by
// dlopen/dlsym (tensor/cuda/dynlib.h): the headers give the types, nothing links the libraries,
// so a CPU-only run of a CUDA-enabled build never maps them. Calls:
// cublaslt_api().cublasLtMatmul(..).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include "tensor/cuda/dynlib.h"

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

namespace minidl::cuda {

#define MINIDL_BLAS_API_MEMBER(name) decltype(&::name) name = nullptr;
struct CublasApi {
  MINIDL_CUBLAS_FUNCTIONS(MINIDL_BLAS_API_MEMBER)
};
struct CublasLtApi {
  MINIDL_CUBLASLT_FUNCTIONS(MINIDL_BLAS_API_MEMBER)
};
#undef MINIDL_BLAS_API_MEMBER

// Loaded on the first call (thread-safe); throws an Error naming the library or symbol that is
// missing and dlerror()'s text, and tries again on the next call.
const CublasApi& cublas_api();
const CublasLtApi& cublaslt_api();

}  // namespace minidl::cuda
