// Adam (L2 weight decay, optional AMSGrad) and AdamW (decoupled weight decay), torch.optim
// semantics with the non-capturable bias correction.
#pragma once
#include <utility>

#include "optim/optimizer.h"
#include "tensor/dispatch.h"

namespace minidl::optim {

// Options: "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad" (0/1), "fused" (0/1, default
// 1: a group whose parameters with a grad are all CUDA tensors on one device is updated by the
// multi-tensor kernels of optim/fused.h, capturable in a CUDA graph; its step counts then live
// on the device and are copied to the CPU by state_dict()).
// State: "state.<i>.step", "state.<i>.exp_avg", "state.<i>.exp_avg_sq" and with amsgrad
// "state.<i>.max_exp_avg_sq".
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
       double eps = 1e-8, double weight_decay = 0, bool amsgrad = false);
  Adam(std::vector<ParamGroup> groups, double lr = 1e-3,
       std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8, double weight_decay = 0,
       bool amsgrad = false);
  void step() override;
  bool supports_amp_scaling() const override;
  void step_with_scaling(const Tensor& grad_scale, const Tensor& found_inf) override;

 protected:
  Adam(std::vector<ParamGroup> groups, Options defaults, bool decoupled);
  void check_options(const Options& o) const override;
  bool decoupled_ = false;  // AdamW

 private:
  // The fused step for group g (global index of its first parameter: idx0), with the AMP
  // inputs when given; false when the group's parameters are not usable by it (CPU ones only
  // with allow_cpu).
  bool fused_step(size_t g, size_t idx0, const FusedAmpArgs* amp, bool allow_cpu);
  void plain_step(size_t g, size_t idx0);  // per-tensor ops
};

// AdamW: p *= 1 - lr*weight_decay, then the Adam update without L2 term.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3,
        std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
        double weight_decay = 1e-2, bool amsgrad = false);
  AdamW(std::vector<ParamGroup> groups, double lr = 1e-3,
        std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
        double weight_decay = 1e-2, bool amsgrad = false);
};

}  // namespace minidl::optim
