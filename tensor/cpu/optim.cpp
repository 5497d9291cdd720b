// CPU kernels of the fused optimizer ops (fused_sgd, fused_adam): the per-tensor math of
// optim/sgd.cpp and optim/adam.cpp, op by op, so results are bitwise equal to the plain steps;
// with AMP inputs the grads are divided by grad_scale and a set found_inf skips everything.
#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/cpu/kernels.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

// True when the step is to be skipped; *scale: the divisor of the grads (1: none).
bool amp_inputs(const FusedAmpArgs& amp, double* scale) {
  *scale = amp.grad_scale.defined() ? double(*static_cast<const float*>(amp.grad_scale.data_ptr()))
                                    : 1.0;
  return amp.found_inf.defined() && *static_cast<const float*>(amp.found_inf.data_ptr()) != 0.0f;
}

Tensor unscaled(const Tensor& g, double scale) {
  return scale == 1.0 ? g : div(g, scale);
}

void fused_sgd_kernel(const FusedSgdArgs& a) {
  double scale = 1.0;
  if (amp_inputs(a.amp, &scale)) return;
  NoGradGuard guard;
  const std::array<double, 8> h = a.hyper->read();
  const double lr = h[0], momentum = h[1], dampening = h[2], wd = h[3];
  for (size_t i = 0; i < a.params.size(); ++i) {
    Tensor p = a.params[i];
    const Tensor grad = unscaled(a.grads[i], scale);
    Tensor d = wd != 0 ? add(grad, p, wd) : grad;
    if (!a.bufs.empty()) {
      Tensor buf = a.bufs[i];
      if (a.first[i]) {
        buf.copy_(d);
      } else {
        mul_(buf, momentum);
        add_(buf, d, 1 - dampening);
      }
      d = a.nesterov ? add(d, buf, momentum) : buf;
    }
    add_(p, d, -lr);
  }
}

void fused_adam_kernel(const FusedAdamArgs& a) {
  double scale = 1.0;
  if (amp_inputs(a.amp, &scale)) return;
  NoGradGuard guard;
  const std::array<double, 8> h = a.hyper->read();
  const double lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], wd = h[4];
  const bool amsgrad = !a.max_exp_avg_sq.empty();
  for (size_t i = 0; i < a.params.size(); ++i) {
    Tensor p = a.params[i];
    Tensor step = a.steps[i];
    const double t = *static_cast<const double*>(step.data_ptr()) + 1;
    step.fill_(t);
    const Tensor grad0 = unscaled(a.grads[i], scale);
    Tensor grad = grad0;
    if (a.decoupled)
      mul_(p, 1 - lr * wd);
    else if (wd != 0)
      grad = add(grad0, p, wd);
    Tensor m = a.exp_avg[i], v = a.exp_avg_sq[i];
    mul_(m, b1);
    add_(m, grad, 1 - b1);
    mul_(v, b2);
    add_(v, mul(grad, grad), 1 - b2);
    const double bc1 = 1 - std::pow(b1, t), bc2_sqrt = std::sqrt(1 - std::pow(b2, t));
    Tensor denom;
    if (amsgrad) {
      Tensor vmax = a.max_exp_avg_sq[i];
      vmax.copy_(maximum(vmax, v));
      denom = div(sqrt(vmax), bc2_sqrt);
    } else {
      denom = div(sqrt(v), bc2_sqrt);
    }
    add_(denom, eps);
    add_(p, div(m, denom), -lr / bc1);
  }
}

}  // namespace

void register_optim_kernels() {
  register_kernel<Op::fused_sgd>(DeviceType::cpu, fused_sgd_kernel);
  register_kernel<Op::fused_adam>(DeviceType::cpu, fused_adam_kernel);
}

}  // namespace minidl::cpu
