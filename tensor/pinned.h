// Page-locked (pinned) host memory for fast, asynchronous host-to-device copies
// (Tensor.pin_memory()). Needs a CUDA build and a CUDA device; CUDA headers stay out of here.
#pragma once
#include "tensor/tensor.h"

namespace minidl {

// An uninitialised contiguous CPU tensor in pinned memory (cudaHostAlloc). Throws when the
// build has no CUDA or no CUDA device is available.
Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
// Whether the tensor's storage is pinned host memory (false without CUDA).
bool is_pinned(const Tensor& t);
// A copy of `t` in pinned memory (t itself when it is already pinned), like Tensor.pin_memory().
// A copy from a pinned tensor to a CUDA device (t.to(cuda)) is queued on the device's compute
// stream and returns at once, as torch's t.to(device, non_blocking=True) does; the runtime keeps
// the source's storage alive until the copy has run. Writing into that pinned source before then
// changes what is copied: call cuda::synchronize() first when reusing a pinned buffer. (Pageable
// sources are staged before to() returns and may be reused at once.)
Tensor pin_memory(const Tensor& t);

}  // namespace minidl
