// SGD and Adam/AdamW update formulas on one tensor, with raw ops (no history; see the header).
#include "tensor/update_rules.h"

#include <cmath>

#include "tensor/ops.h"

namespace minidl::update_rules {

void sgd(const Tensor& p_in, const Tensor& grad, const Tensor& buf_in, bool first,
         const SgdHyper& h) {
  Tensor p = p_in;
  Tensor d = h.weight_decay != 0 ? native::add(grad, p, h.weight_decay) : grad;
  if (buf_in.defined()) {
    Tensor buf = buf_in;
    if (first) {
      native::copy_(buf, d);
    } else {
      native::mul_(buf, h.momentum);
      native::add_(buf, d, 1 - h.dampening);
    }
    d = h.nesterov ? native::add(d, buf, h.momentum) : buf;
  }
  native::add_(p, d, -h.lr);
}

void adam(const Tensor& p_in, const Tensor& grad0, const Tensor& exp_avg, const Tensor& exp_avg_sq,
          const Tensor& max_exp_avg_sq, double t, const AdamHyper& h) {
  Tensor p = p_in, m = exp_avg, v = exp_avg_sq;
  Tensor grad = grad0;
  if (h.decoupled)
    native::mul_(p, 1 - h.lr * h.weight_decay);
  else if (h.weight_decay != 0)
    grad = native::add(grad0, p, h.weight_decay);
  native::mul_(m, h.beta1);
  native::add_(m, grad, 1 - h.beta1);
  native::mul_(v, h.beta2);
  native::add_(v, native::mul(grad, grad), 1 - h.beta2);
  const double bc1 = 1 - std::pow(h.beta1, t), bc2_sqrt = std::sqrt(1 - std::pow(h.beta2, t));
  Tensor denom;
  if (max_exp_avg_sq.defined()) {
    native::copy_(max_exp_avg_sq, native::maximum(max_exp_avg_sq, v));
    denom = native::div(native::sqrt(max_exp_avg_sq), bc2_sqrt);
  } else {
    denom = native::div(native::sqrt(v), bc2_sqrt);
  }
  native::add_(denom, h.eps);
  native::add_(p, native::div(m, denom), -h.lr / bc1);
}

}  // namespace minidl::update_rules
