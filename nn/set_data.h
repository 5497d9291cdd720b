// PyTorch's `t.data = src`: `t` takes `src`'s storage, shape, strides, offset and dtype while
// keeping its TensorImpl, so every handle to it (optimizers, autograd accumulators, tied modules,
// wrappers) and its autograd metadata (requires_grad, grad, hooks) stay. Module::to uses it, and
// FSDP's MixedPrecision casts the model's buffers with it.
#pragma once
#include "tensor/tensor.h"

namespace minidl::nn {

void set_data(const Tensor& t, const Tensor& src);

}  // namespace minidl::nn
