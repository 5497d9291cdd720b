// nn.Linear's parameter gradients into caller-typed buffers: dW = g^T x and db = colsum(g)
// written in the dtype of grad_w / grad_b (the GEMM's f32 accumulator for bf16/f16 inputs under
// autocast: no 16-bit rounding and no cast). linear_weight_grad (tensor/ops.h) is the same-dtype
// form.
#pragma once
#include "tensor/tensor.h"

namespace minidl::native {

// g:[*, N], x:[*, K] of one floating dtype; grad_w:[N, K] contiguous, of g's dtype or, for
// f16/bf16 g, f32; grad_b (optional) [N] of grad_w's dtype. Overwrites both.
void linear_weight_grad_into(const Tensor& g, const Tensor& x, Tensor& grad_w, Tensor& grad_b);

}  // namespace minidl::native
