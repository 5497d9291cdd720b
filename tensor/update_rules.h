// The per-tensor update formulas of SGD and Adam/AdamW, written once with raw ops: the plain
// steps of optim/sgd.cpp and optim/adam.cpp and the CPU fused kernels (tensor/cpu/optim.cpp)
// all call these, so the fused and the plain step give bitwise the same parameters.
#pragma once
#include "tensor/tensor.h"

namespace minidl::update_rules {

struct SgdHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
// p -= lr * d, d = grad + wd*p, through the momentum buffer when `buf` is defined (first step:
// buf = d, then buf = momentum*buf + (1-dampening)*d; nesterov: d + momentum*buf).
void sgd(const Tensor& p, const Tensor& grad, const Tensor& buf, bool first, const SgdHyper& h);

struct AdamHyper {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false;  // AdamW: p *= 1 - lr*wd instead of grad += wd*p
};
// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; denom = sqrt(v or max_v)/sqrt(1-b2^t) + eps;
// p -= lr/(1-b1^t) * m/denom. `step` is t, already incremented; max_exp_avg_sq undefined: no
// amsgrad. `copy` defined: set to the new p converted to its dtype (autocast's 16-bit copy of
// the weight, made in the same pass where p is contiguous f32 on the CPU).
void adam(const Tensor& p, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
          const Tensor& max_exp_avg_sq, double step, const AdamHyper& h,
          const Tensor& copy = Tensor());

}  // namespace minidl::update_rules
