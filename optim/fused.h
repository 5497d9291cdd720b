// Frontends of the AMP and fused-optimizer ops of the kernel table (tensor/op_list.def:
// non_finite_check_and_unscale, amp_update_scale, fused_sgd, fused_adam): validation, then one
// dispatch. CUDA kernels: tensor/cuda/amp.cu, optim.cu; CPU: tensor/cpu/amp.cpp, optim.cpp.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "tensor/dispatch.h"
#include "tensor/tensor.h"

namespace minidl::amp {

// PyTorch's torch._amp_foreach_non_finite_check_and_unscale_: one pass over `grads` (floating
// tensors on found_inf's device): g *= inv_scale, found_inf = 1 when any g held an inf/NaN.
// found_inf and inv_scale are 0-d f32 tensors; nothing is read back to the host.
void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf,
                                   const Tensor& inv_scale);

// PyTorch's torch._amp_update_scale_ (in place on scale (0-d f32) and growth_tracker (0-d int32),
// all three on one device); returns scale.
Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                          double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace minidl::amp

namespace minidl::optim::fused {

// Whether the fused kernels can update `params` (those that have a grad): every one a dense,
// contiguous, floating tensor on one device, with a contiguous grad of its dtype, shape and
// device. CUDA only unless allow_cpu (the optimizers pass it: the CPU kernels run the plain
// step's per-tensor update rules, bitwise equal, as one dispatch). False for an empty list.
bool usable(const std::vector<Tensor>& params, bool allow_cpu = false);

using HyperValues = std::array<double, 8>;
using Hyper = FusedHyper;
using HyperHandle = std::shared_ptr<FusedHyper>;
HyperHandle make_hyper(std::function<HyperValues()> read);

// The fused_sgd / fused_adam ops (tensor/dispatch.h documents the arguments). Every state list
// must match the parameters (dtype, shape, device, contiguous); amp tensors, when given, are 0-d
// f32 tensors on the parameters' device.
void sgd_step(const FusedSgdArgs& args);
void adam_step(const FusedAdamArgs& args);

// clip_grad_norm_'s ops (torch._foreach_norm and the clamped _foreach_mul_): the total p-norm
// (p > 0 or inf) of `tensors` (floating, one device; empty ones skipped) as a 0-d f64 tensor on
// their device, nothing read back; and every tensor *= max_norm / (total + 1e-6) where that is
// below 1 (or NaN), decided on the device. `tensors` must not be empty.
Tensor foreach_norm(const std::vector<Tensor>& tensors, double norm_type);
void foreach_clip_by_norm_(const std::vector<Tensor>& tensors, const Tensor& total,
                           double max_norm);

// Makes a state tensor (momentum buffer, exp_avg, step, ...) contiguous, of dtype `dt` and on
// `dev` (e.g. after load_state_dict put it on the CPU, or after a module.to()).
inline void place_state(Tensor& s, Device dev, DType dt) {
  if (s.device() != dev || s.dtype() != dt) s = s.to(dev, dt);
  s = s.contiguous();
}

}  // namespace minidl::optim::fused
