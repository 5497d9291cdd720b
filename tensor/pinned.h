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
Tensor pin_memory(const Tensor& t);

}  // namespace minidl
