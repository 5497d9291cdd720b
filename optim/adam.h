// Adam (L2 weight decay, optional AMSGrad) and AdamW (decoupled weight decay), torch.optim
// semantics with the non-capturable bias correction.
#pragma once
#include <utility>

#include "optim/optimizer.h"

namespace minidl::optim {

// Options: "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad" (0/1).
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

 protected:
  Adam(std::vector<ParamGroup> groups, Options defaults, bool decoupled);
  void check_options(const Options& o) const override;
  bool decoupled_ = false;  // AdamW
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
