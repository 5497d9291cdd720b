// The element-wise losses (mse, l1, smooth_l1, huber, binary cross-entropy on probabilities) and
// their Modules; the regression ones warn, as PyTorch does, when target broadcasts to input.
#include <string_view>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "nn/loss.h"
#include "nn/loss_reduction.h"
#include "tensor/warning.h"

namespace minidl::nn {
namespace functional {
namespace {

// Checks input/target and warns once per call site when their shapes differ (they broadcast).
void check_regression(std::string_view op, const Tensor& input, const Tensor& target,
                      const SourceLocation& caller) {
  MINIDL_CHECK(input.defined() && target.defined(), "op `", op, "`: undefined input");
  MINIDL_CHECK(input.is_floating_point(), "op `", op, "`: expected floating input, got dtype ",
               input.dtype());
  const Shape out = broadcast_shapes(input.shape(), target.shape(), op);
  if (target.shape() == input.shape()) return;
  // A loss Module calls from this file: its site says nothing to the user, so leave it out.
  const bool from_module =
      std::string_view(caller.file_name()) == SourceLocation::current().file_name();
  const std::string site =
      from_module
          ? std::string()
          : ::minidl::detail::concat(" (called at ", caller.file_name(), ":", caller.line(), ")");
  warn_once(
      std::string(op) + "@" + call_site_key(caller),
      ::minidl::detail::concat(
          op, ": using a target size ", target.shape_str(), " that is different to the input size ",
          input.shape_str(), site, ". They broadcast to ", shape_str(out),
          ", which is likely not what you want: give both the same shape (e.g. "
          "target.view_as(input) or input.squeeze(-1))."));
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                SourceLocation caller) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::mse_loss>(input, target))
    return mse_loss(ac[0], ac[1], reduction, caller);
  check_regression("mse_loss", input, target, caller);
  return detail::reduce_loss(square(input - target), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction,
               SourceLocation caller) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::l1_loss>(input, target))
    return l1_loss(ac[0], ac[1], reduction, caller);
  check_regression("l1_loss", input, target, caller);
  return detail::reduce_loss(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta,
                      SourceLocation caller) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::smooth_l1_loss>(input, target))
    return smooth_l1_loss(ac[0], ac[1], reduction, beta, caller);
  check_regression("smooth_l1_loss", input, target, caller);
  MINIDL_CHECK(beta >= 0, "op `smooth_l1_loss`: beta must be non-negative, got ", beta);
  if (beta == 0) return l1_loss(input, target, reduction, caller);
  Tensor d = abs(input - target);
  return detail::reduce_loss(where(lt(d, Scalar(beta)), square(d) * (0.5 / beta), d - 0.5 * beta),
                             reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta,
                  SourceLocation caller) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::huber_loss>(input, target))
    return huber_loss(ac[0], ac[1], reduction, delta, caller);
  check_regression("huber_loss", input, target, caller);
  MINIDL_CHECK(delta > 0, "op `huber_loss`: delta must be positive, got ", delta);
  Tensor d = abs(input - target);
  return detail::reduce_loss(
      where(lt(d, Scalar(delta)), square(d) * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            Reduction reduction) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::binary_cross_entropy>(input, target, weight))
    return binary_cross_entropy(ac[0], ac[1], ac[2], reduction);
  constexpr std::string_view op = "binary_cross_entropy";
  MINIDL_CHECK(input.defined() && target.defined(), "op `", op, "`: undefined input");
  MINIDL_CHECK(input.is_floating_point() && target.is_floating_point(), "op `", op,
               "`: expected floating input and target, got dtypes ", input.dtype(), " and ",
               target.dtype());
  MINIDL_CHECK(input.shape() == target.shape(), "op `", op, "`: using a target size ",
               target.shape_str(), " that is different to the input size ", input.shape_str(),
               " is not supported; give both the same shape");
  if (weight.defined()) broadcast_shapes(weight.shape(), input.shape(), op);
  if (!input.is_cuda() && input.numel() > 0) {
    // CPU: PyTorch's range check (on CUDA it would stall the stream every step).
    NoGradGuard ng;
    const Tensor outside = logical_or(lt(input, Scalar(0)), gt(input, Scalar(1)));
    MINIDL_CHECK(sum(outside).item<int64_t>() == 0, "op `", op,
                 "`: all elements of input should be between 0 and 1 ", "(input of shape ",
                 input.shape_str(),
                 "); pass probabilities (apply sigmoid first), or use "
                 "binary_cross_entropy_with_logits on the logits");
  }
  Tensor log_x = clamp(log(input), Scalar(-100), std::nullopt);
  Tensor log_1mx = clamp(log(neg(input) + 1.0), Scalar(-100), std::nullopt);
  Tensor loss = neg(target * log_x + (neg(target) + 1.0) * log_1mx);
  if (weight.defined()) loss = loss * weight;
  return detail::reduce_loss(loss, reduction);
}

}  // namespace functional

MSELoss::MSELoss(Reduction r) {
  this->reduction = r;
}
Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::mse_loss(input, target, reduction);
}

L1Loss::L1Loss(Reduction r) {
  this->reduction = r;
}
Tensor L1Loss::forward(const Tensor& input, const Tensor& target) {
  return functional::l1_loss(input, target, reduction);
}

SmoothL1Loss::SmoothL1Loss(Reduction r, double b) : beta(b) {
  this->reduction = r;
}
Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return functional::smooth_l1_loss(input, target, reduction, beta);
}

HuberLoss::HuberLoss(Reduction r, double d) : delta(d) {
  this->reduction = r;
}
Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::huber_loss(input, target, reduction, delta);
}

BCELoss::BCELoss(Tensor w, Reduction r) : weight(std::move(w)) {
  this->reduction = r;
  if (weight.defined()) register_buffer("weight", &weight);
}
Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy(input, target, weight, reduction);
}

}  // namespace minidl::nn
