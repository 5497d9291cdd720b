// The differentiable cross_entropy: index targets run the raw op (tensor/ops/loss.cpp) and
// record one fused node (gradient to the logits only); class-probability targets are torch's
// composite of differentiable ops (gradients to logits and target).
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {
namespace {

// Class-probability targets (floating target of the logits' shape): torch 1.13's composite
// cross_entropy_loss_prob_target, so autograd gives the gradient to the logits and the target:
// loss = -sum_c t_c * log_softmax(logits)_c with t = target (1 - ls) + ls / C; mean divides by
// N*d1*... (the number of class rows), as torch. No lse is saved (the result's lse is empty).
// native::cross_entropy computes the same value (same checks) from the raw ops.
Tensor cross_entropy_prob_target(const Tensor& logits, const Tensor& target, Reduction reduction,
                                 int64_t ignore_index, double label_smoothing) {
  constexpr std::string_view op = "cross_entropy";
  MINIDL_CHECK(logits.is_floating_point(), "op `", op, "`: expected floating logits, got dtype ",
               logits.dtype());
  MINIDL_CHECK(logits.dim() >= 1 && target.shape() == logits.shape(), "op `", op,
               "`: class-probability target shape ", target.shape_str(),
               " must equal the logits shape ", logits.shape_str());
  MINIDL_CHECK(target.device() == logits.device(), "op `", op, "`: target is on ", target.device(),
               " but logits are on ", logits.device());
  MINIDL_CHECK(ignore_index < 0, "op `", op, "`: ignore_index is not supported for floating ",
               "point target (got ", ignore_index, ")");
  MINIDL_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "op `", op,
               "`: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  const int64_t cdim = logits.dim() == 1 ? 0 : 1, C = logits.size(cdim);
  Tensor t = target;
  if (label_smoothing > 0) t = add(mul(target, 1.0 - label_smoothing), label_smoothing / double(C));
  Tensor per_sample = neg(sum(mul(log_softmax(logits, cdim), t), {cdim}));
  switch (reduction) {
    case Reduction::none:
      return per_sample;
    case Reduction::sum:
      return sum(per_sample);
    case Reduction::mean:
      break;
  }
  return div(sum(per_sample), Scalar(C > 0 ? logits.numel() / C : 0));
}

}  // namespace

CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                         Reduction reduction, int64_t ignore_index,
                                         double label_smoothing) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::cross_entropy>(logits, target))
    return cross_entropy_forward(ac[0], ac[1], reduction, ignore_index, label_smoothing);
  // torch's rule: a target of the logits' shape holds class probabilities
  if (target.defined() && logits.defined() && target.is_floating_point() &&
      target.shape() == logits.shape())
    return {cross_entropy_prob_target(logits, target, reduction, ignore_index, label_smoothing),
            Tensor()};
  CrossEntropyResult res =
      native::cross_entropy_forward(logits, target, reduction, ignore_index, label_smoothing);
  autograd::record("CrossEntropyBackward", {logits}, {&res.loss}, {logits, target, res.lse},
                   [reduction, ignore_index, label_smoothing](const auto& g, const auto& s) {
                     return std::vector<Tensor>{cross_entropy_backward(
                         g[0], s[0], s[1], s[2], reduction, ignore_index, label_smoothing)};
                   });
  return res;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  return cross_entropy_forward(logits, target, reduction, ignore_index, label_smoothing).loss;
}

}  // namespace minidl
