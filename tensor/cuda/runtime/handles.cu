// Lazily created cuBLAS / cuBLASLt / cuDNN handles per device (bound to the compute stream),
// the cuBLASLt workspace, and the library error messages.
#include <mutex>

#include "tensor/cuda/runtime/handles.cuh"
#include "tensor/ops.h"

namespace minidl::cuda {

namespace detail {
void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  // A status comes from a loaded library; cuBLAS loads cuBLASLt as its dependency.
  const char* text = "(cuBLASLt not loaded)";
  try {
    text = cublaslt_api().cublasLtGetStatusString(st);
  } catch (const Error&) {
  }
  MINIDL_FAIL("cuBLAS error: ", call, " failed at ", file, ":", line, ": ", text, " (status ",
              int(st), ")");
}
#ifdef MINIDL_WITH_CUDNN
void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line) {
  char last[512] = {0};
  cudnn_api().cudnnGetLastErrorString(last, sizeof(last));
  MINIDL_FAIL("cuDNN error: ", call, " failed at ", file, ":", line, ": ",
              cudnn_api().cudnnGetErrorString(st), last[0] ? " — " : "", last);
}
#endif
}  // namespace detail

namespace {
constexpr int kMaxDevices = 64;
constexpr size_t kLtWorkspace = size_t(32) << 20;  // cuBLAS's own default on Hopper

struct Handles {
  std::once_flag blas_once, lt_once, dnn_once;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  Tensor workspace;  // from the caching allocator, so it counts in memory_stats (as PyTorch's)
  size_t workspace_bytes = 0;
#ifdef MINIDL_WITH_CUDNN
  cudnnHandle_t dnn = nullptr;
#endif
};
// Never destroyed: destroying handles after the driver unloads at exit crashes.
Handles* g_handles[kMaxDevices] = {};
std::once_flag g_handles_once[kMaxDevices];

Handles& handles(int device) {
  MINIDL_CHECK(device >= 0 && device < kMaxDevices, "bad CUDA device index ", device);
  std::call_once(g_handles_once[device], [&] { g_handles[device] = new Handles(); });
  return *g_handles[device];
}
}  // namespace

void* lt_workspace(int device, size_t* nbytes) {
  Handles& h = handles(device);
  std::call_once(h.lt_once, [&] {
    TensorDeviceGuard guard(device);
    MINIDL_CUBLAS_CHECK(cublaslt_api().cublasLtCreate(&h.lt));
    h.workspace = empty({int64_t(kLtWorkspace)}, DType::u8, Device(DeviceType::cuda, device));
    h.workspace_bytes = kLtWorkspace;
  });
  *nbytes = h.workspace_bytes;
  return h.workspace.data_ptr();
}

cublasLtHandle_t cublaslt_handle(int device) {
  size_t n = 0;
  (void)lt_workspace(device, &n);
  return handles(device).lt;
}

cublasHandle_t cublas_handle(int device) {
  Handles& h = handles(device);
  std::call_once(h.blas_once, [&] {
    TensorDeviceGuard guard(device);
    const CublasApi& api = cublas_api();
    MINIDL_CUBLAS_CHECK(api.cublasCreate(&h.blas));
    MINIDL_CUBLAS_CHECK(api.cublasSetStream(h.blas, compute_stream(device)));
    // A fixed workspace keeps cuBLAS from allocating during graph capture.
    size_t n = 0;
    void* ws = lt_workspace(device, &n);
    MINIDL_CUBLAS_CHECK(api.cublasSetWorkspace(h.blas, ws, n));
  });
  return h.blas;
}

#ifdef MINIDL_WITH_CUDNN
cudnnHandle_t cudnn_handle(int device) {
  Handles& h = handles(device);
  std::call_once(h.dnn_once, [&] {
    TensorDeviceGuard guard(device);
    MINIDL_CUDNN_CHECK(cudnn_api().cudnnCreate(&h.dnn));
    MINIDL_CUDNN_CHECK(cudnn_api().cudnnSetStream(h.dnn, compute_stream(device)));
  });
  return h.dnn;
}
#endif

}  // namespace minidl::cuda
