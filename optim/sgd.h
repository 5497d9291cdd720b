// Stochastic gradient descent with momentum, dampening, L2 weight decay and Nesterov momentum
// (torch.optim.SGD semantics).
#pragma once
#include "optim/optimizer.h"
#include "tensor/dispatch.h"

namespace minidl::optim {

// Options: "lr", "momentum", "dampening", "weight_decay", "nesterov" (0/1), "fused" (0/1,
// default 1: a group whose parameters with a grad are all CUDA tensors on one device is updated
// by the multi-tensor kernels of optim/fused.h, capturable in a CUDA graph).
// State: "state.<i>.momentum_buffer" (only when momentum != 0), on the parameter's device.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  void step() override;
  bool supports_amp_scaling() const override;
  void step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) override;

 protected:
  void check_options(const Options& o) const override;

 private:
  // The fused step for group g (global index of its first parameter: idx0), with the AMP
  // inputs when given; false when the group's parameters are not usable by it (CPU ones only
  // with allow_cpu).
  bool fused_step(size_t g, size_t idx0, const FusedAmpArgs* amp, bool allow_cpu);
  void plain_step(size_t g, size_t idx0);  // per-tensor ops
};

}  // namespace minidl::optim
