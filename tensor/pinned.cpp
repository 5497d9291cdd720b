// Pinned host tensors: cudaHostAlloc'd storage wrapped with a cudaFreeHost deleter when built
// with CUDA (tensor/cuda/runtime/device.cu); clear errors otherwise.
#include "tensor/pinned.h"

#include "tensor/cuda_api.h"
#include "tensor/error.h"
#include "tensor/ops.h"

#ifdef MINIDL_WITH_CUDA
#include "tensor/cuda/runtime/device.h"
#endif

namespace minidl {

Tensor empty_pinned(const Shape& shape, DType dtype) {
  for (int64_t s : shape)
    MINIDL_CHECK(s >= 0, "empty_pinned: negative size in shape ", shape_str(shape));
#ifdef MINIDL_WITH_CUDA
  MINIDL_CHECK(cuda_is_available(),
               "empty_pinned: pinned memory needs a CUDA device: ", cuda::unavailable_reason());
  const size_t nbytes = size_t(shape_numel(shape)) * itemsize(dtype);
  void* p = cuda::host_alloc_pinned(nbytes);
  return from_blob(p, shape, dtype, kCPU, [](void* q) { cuda::host_free_pinned(q); });
#else
  (void)dtype;
  MINIDL_FAIL("empty_pinned: pinned memory needs CUDA, but minidl was built without CUDA");
#endif
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.is_cpu()) return false;
#ifdef MINIDL_WITH_CUDA
  return cuda_is_available() && cuda::is_pinned_host_ptr(t.storage()->data());
#else
  return false;
#endif
}

Tensor pin_memory(const Tensor& t) {
  MINIDL_CHECK(t.defined(), "pin_memory: undefined tensor");
  MINIDL_CHECK(t.is_cpu(), "pin_memory: only CPU tensors can be pinned, got one on ", t.device());
  if (is_pinned(t)) return t;
  Tensor out = empty_pinned(t.shape(), t.dtype());
  native::copy_(out, t);
  return out;
}

}  // namespace minidl
