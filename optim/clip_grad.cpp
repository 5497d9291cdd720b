// Gradient clipping by total norm (two list ops, foreach_norm and foreach_clip_by_norm, as
// PyTorch's foreach path) and by value.
#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/error.h"
#include "autograd/ops.h"
#include "optim/fused.h"
#include "tensor/variants.h"

namespace minidl::optim {
namespace {

void check_finite(double total, double norm_type, bool error_if_nonfinite) {
  MINIDL_CHECK(!error_if_nonfinite || std::isfinite(total),
               "clip_grad_norm_: the total norm of order ", norm_type,
               " for gradients from `parameters` is non-finite (", total,
               "), so it cannot be clipped");
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard guard;
  MINIDL_CHECK(norm_type > 0 || std::isinf(norm_type),
               "clip_grad_norm_: norm_type must be positive or inf, got ", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return zeros({}, kFloat64);
  const Device dev = grads[0].device();
  const bool one_device = std::all_of(grads.begin(), grads.end(), [&](const Tensor& g) {
    return g.device() == dev && g.is_floating_point();
  });
  if (one_device && variants::fused("foreach_clip")) {
    // Two dispatches for any number of grads (PyTorch's foreach path): the total norm stays on
    // the device, which also decides whether to scale; no host read unless asked to check.
    const Tensor total = fused::foreach_norm(grads, norm_type);
    if (error_if_nonfinite) check_finite(total.item<double>(), norm_type, true);
    fused::foreach_clip_by_norm_(grads, total, max_norm);
    return total;
  }
  // Grads on several devices: per-grad norms combined on the first grad's device in f64.
  const bool inf = std::isinf(norm_type);
  Tensor acc = zeros({}, kFloat64, dev);
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    Tensor a = abs(g).to(kFloat64);
    Tensor s = inf                ? max(a)
               : norm_type == 2.0 ? sum(mul(a, a))
               : norm_type == 1.0 ? sum(a)
                                  : sum(pow(a, norm_type));
    s = s.to(dev);
    acc = inf ? maximum(acc, s) : add(acc, s);
  }
  if (!inf) acc = pow(acc, 1.0 / norm_type);
  const double total = acc.item<double>();
  check_finite(total, norm_type, error_if_nonfinite);
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1))  // nan total: grads become nan, like PyTorch
    for (Tensor& g : grads) mul_(g, coef);
  return acc;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  NoGradGuard guard;
  for (const Tensor& p : params)
    if (p.grad().defined()) {
      Tensor g = p.grad();
      clamp_(g, -clip_value, clip_value);
    }
}

}  // namespace minidl::optim
