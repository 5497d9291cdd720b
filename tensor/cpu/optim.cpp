// CPU kernels of the fused optimizer ops (fused_sgd, fused_adam): the per-tensor update formulas
// the plain steps of optim/sgd.cpp and optim/adam.cpp use too (tensor/update_rules.h), so results
// are bitwise equal; with AMP inputs the grads are divided by grad_scale and a set found_inf skips
// everything.
#include <cmath>

#include "tensor/cpu/kernels.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"
#include "tensor/update_rules.h"

namespace minidl::cpu {
namespace {

// True when the step is to be skipped; *scale: the divisor of the grads (1: none).
bool amp_inputs(const FusedAmpArgs& amp, double* scale) {
  *scale = amp.grad_scale.defined() ? double(*static_cast<const float*>(amp.grad_scale.data_ptr()))
                                    : 1.0;
  return amp.found_inf.defined() && *static_cast<const float*>(amp.found_inf.data_ptr()) != 0.0f;
}

Tensor unscaled(const Tensor& g, double scale) {
  return scale == 1.0 ? g : native::div(g, scale);
}

void fused_sgd_kernel(const FusedSgdArgs& a) {
  double scale = 1.0;
  if (amp_inputs(a.amp, &scale)) return;
  const std::array<double, 8> h = a.hyper->read();
  const update_rules::SgdHyper hyper{h[0], h[1], h[2], h[3], a.nesterov};
  for (size_t i = 0; i < a.params.size(); ++i)
    update_rules::sgd(a.params[i], unscaled(a.grads[i], scale),
                      a.bufs.empty() ? Tensor() : a.bufs[i], !a.bufs.empty() && a.first[i], hyper);
}

void fused_adam_kernel(const FusedAdamArgs& a) {
  double scale = 1.0;
  if (amp_inputs(a.amp, &scale)) return;
  const std::array<double, 8> h = a.hyper->read();
  const update_rules::AdamHyper hyper{h[0], h[1], h[2], h[3], h[4], a.decoupled};
  const bool amsgrad = !a.max_exp_avg_sq.empty();
  for (size_t i = 0; i < a.params.size(); ++i) {
    const Tensor& step = a.steps[i];
    const double t = *static_cast<const double*>(step.data_ptr()) + 1;
    native::fill_(step, t);
    update_rules::adam(a.params[i], unscaled(a.grads[i], scale), a.exp_avg[i], a.exp_avg_sq[i],
                       amsgrad ? a.max_exp_avg_sq[i] : Tensor(), t, hyper);
  }
}

}  // namespace

void register_optim_kernels() {
  register_kernel<Op::fused_sgd>(DeviceType::cpu, fused_sgd_kernel);
  register_kernel<Op::fused_adam>(DeviceType::cpu, fused_adam_kernel);
}

}  // namespace minidl::cpu
