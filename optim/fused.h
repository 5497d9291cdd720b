// Fused multi-tensor optimizer steps for CUDA parameters (PyTorch's fused/foreach SGD and
// Adam(W)): a group is updated in a few kernel launches, with the step counts and hyper-parameters
// read from device memory so the step can be captured in a CUDA graph. Plain C++ interface; the
// kernels live in tensor/cuda/optim.cu (optim/fused.cpp is the CPU-build fallback).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace minidl::optim::fused {

// Whether the fused path can update `params` (those that have a grad): every one a dense,
// contiguous, floating CUDA tensor on one device, with a grad of its dtype, shape and device
// that is contiguous too. Always false in a build without CUDA and for an empty list.
bool usable(const std::vector<Tensor>& params);

// A group's hyper-parameters as the kernels read them from device memory, in this order:
//   SGD:  {lr, momentum, dampening, weight_decay}
//   Adam: {lr, beta1, beta2, eps, weight_decay}
using HyperValues = std::array<double, 8>;

// Per-group device copy of the hyper-parameters. `read` returns the group's current host values:
// it is called on every eager step (values uploaded before the kernels) and, when a step is
// captured in a CUDA graph, before every replay of that graph (so an LR scheduler works with a
// captured step). The replay hook holds a weak_ptr: a destroyed optimizer is skipped.
struct Hyper;  // defined in tensor/cuda/optim.cu (an empty stand-in in the CPU build)
using HyperHandle = std::shared_ptr<Hyper>;
HyperHandle make_hyper(std::function<HyperValues()> read);

// SGD over params[i] / grads[i] with momentum buffers bufs[i] (all undefined when momentum is
// off: then bufs is empty). first[i] != 0: bufs[i] is set to the (weight-decayed) gradient, as
// on PyTorch's first step. Math equals optim/sgd.cpp in order and rounding (f32 and f64 in
// their own precision; f16/bf16 compute in float and round on store).
void sgd_step(const HyperHandle& hyper, bool nesterov, const std::vector<Tensor>& params,
              const std::vector<Tensor>& grads, const std::vector<Tensor>& bufs,
              const std::vector<uint8_t>& first);

// Adam/AdamW over params[i] with exp_avg m[i], exp_avg_sq v[i], max_exp_avg_sq vmax[i] (amsgrad;
// empty otherwise) and step counts steps[i] (0-d f64 tensors on the device, incremented by one
// here before the update; bias corrections are computed from them on the device).
void adam_step(const HyperHandle& hyper, bool decoupled, const std::vector<Tensor>& params,
               const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
               const std::vector<Tensor>& v, const std::vector<Tensor>& vmax,
               const std::vector<Tensor>& steps);

// Makes a state tensor (momentum buffer, exp_avg, step, ...) contiguous, of dtype `dt` and on
// `dev` (e.g. after load_state_dict put it on the CPU, or after a module.to()).
inline void place_state(Tensor& s, Device dev, DType dt) {
  if (s.device() != dev || s.dtype() != dt) s = s.to(dev, dt);
  s = s.contiguous();
}

}  // namespace minidl::optim::fused
