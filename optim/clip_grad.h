// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_).
#pragma once
#include <vector>

#include "tensor/tensor.h"

namespace minidl::optim {

// Total norm of all defined .grad of `params` (norm_type p > 0 or INFINITY); when above
// max_norm, scales every grad in place by max_norm / (total + 1e-6), decided on the device.
// Returns the total norm (before clipping) as a 0-d f64 tensor on the grads' device, like
// torch's (0 when no grad): nothing is read back to the host, so the step does not wait for
// the device here. error_if_nonfinite: throw when the total is nan/inf (this reads it: a sync).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every defined .grad of `params` in place to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace minidl::optim

// torch.nn.utils.clip_grad_norm_ / clip_grad_value_: where PyTorch users reach for them.
namespace minidl::nn::utils {
using optim::clip_grad_norm_;
using optim::clip_grad_value_;
}  // namespace minidl::nn::utils
