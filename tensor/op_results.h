// The result types and parameters that the raw ops (tensor/ops.h, namespace minidl::native) and
// the differentiable ops (autograd/ops.h) share: LayerNorm/BatchNorm results and gradients, the
// loss reduction, attention's forward result and gradients, pool2d_params.
#pragma once
#include <cstdint>
#include <optional>

#include "tensor/dispatch.h"
#include "tensor/tensor.h"

namespace minidl {

// Helper: fills a Pool2dParams PyTorch-style (stride defaults to kernel size).
Pool2dParams pool2d_params(int64_t kernel, std::optional<int64_t> stride = std::nullopt,
                           int64_t padding = 0);
struct LayerNormResult {
  Tensor out, mean, rstd;
};
struct LayerNormGrads {
  Tensor grad_x, grad_w, grad_b;
};
struct AddLayerNormResult {
  Tensor sum, out, mean, rstd;  // sum: x + y (x itself when y is undefined)
};
struct AddLayerNormGrads {
  Tensor grad_x, grad_y, grad_w, grad_b;
};
struct BatchNormResult {
  Tensor out, save_mean, save_invstd;
};
struct BatchNormGrads {
  Tensor grad_x, grad_w, grad_b;
};
enum class Reduction { none, mean, sum };
struct CrossEntropyResult {
  Tensor loss;  // reduced per `reduction`
  Tensor lse;   // [N] saved for backward
};
struct SdpaForwardResult {
  Tensor out;  // [..., L, Ev]
  Tensor lse;  // [..., L] f32 (f64 for f64 inputs)
};
struct SdpaGrads {
  Tensor grad_q, grad_k, grad_v;
};

}  // namespace minidl
