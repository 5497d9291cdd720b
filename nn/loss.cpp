// Loss functions: functional forms composed of differentiable ops (autograd comes from the
// ops they use; binary_cross_entropy_with_logits records its own node, PyTorch's gradients) and
// the loss Module wrappers.
#include "nn/loss.h"
#include "nn/loss_reduction.h"

#include <limits>

#include "autograd/function.h"
#include "autograd/autocast.h"

namespace minidl::nn {

Reduction parse_reduction(std::string_view s) {
  if (s == "none") return Reduction::none;
  if (s == "mean") return Reduction::mean;
  if (s == "sum") return Reduction::sum;
  MINIDL_CHECK(false, "loss: reduction must be 'none', 'mean' or 'sum', got '", s, "'");
  return Reduction::mean;
}

namespace functional {

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  return minidl::cross_entropy(logits, target, reduction, ignore_index, label_smoothing);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::nll_loss>(log_probs, target))
    return nll_loss(ac[0], ac[1], reduction, ignore_index);
  MINIDL_CHECK(log_probs.defined() && target.defined(), "op `nll_loss`: undefined input");
  MINIDL_CHECK(log_probs.is_floating_point(), "op `nll_loss`: expected floating input, got dtype ",
               log_probs.dtype());
  MINIDL_CHECK(target.dtype() == kInt64, "op `nll_loss`: expected target of dtype int64, got ",
               target.dtype());
  MINIDL_CHECK(log_probs.dim() >= 1, "op `nll_loss`: expected input of shape [C], [N, C] or ",
               "[N, C, d1, ...], got ", log_probs.shape_str());
  // Move the class dim last: rows [M, C], per-sample shape = target's shape.
  Tensor rows = log_probs;
  Shape per_sample;
  if (log_probs.dim() >= 2) {
    per_sample = log_probs.shape();
    per_sample.erase(per_sample.begin() + 1);
    DimList perm{0};
    for (int64_t d = 2; d < log_probs.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    rows = log_probs.permute(perm);
  }
  MINIDL_CHECK(target.shape() == per_sample, "op `nll_loss`: target shape ", target.shape_str(),
               " does not match input shape ", log_probs.shape_str(), " (expected target shape ",
               shape_str(per_sample), ")");
  const int64_t C = log_probs.size(log_probs.dim() >= 2 ? 1 : 0);
  const int64_t M = shape_numel(per_sample);
  rows = rows.reshape({M, C});
  Tensor t = target.reshape({M});
  Tensor valid = ne(t, Scalar(ignore_index));
  Tensor bad;
  if (M > 0) {
    bad = logical_and(valid, logical_or(lt(t, Scalar(0)), ge(t, Scalar(C))));
    // CPU: a clear error. CUDA: reading the check back would stall the stream every step and
    // cannot be captured in a CUDA graph, so an out-of-range target gives a NaN loss instead.
    if (!log_probs.is_cuda())
      MINIDL_CHECK(sum(bad).item<int64_t>() == 0, "op `nll_loss`: target index out of range [0, ",
                   C, ") for input of shape ", log_probs.shape_str());
  }
  const bool poison = log_probs.is_cuda() && M > 0;
  Tensor safe = where(poison ? logical_and(valid, logical_not(bad)) : valid, t, Scalar(0));
  Tensor picked = gather(rows, 1, safe.unsqueeze(1)).squeeze(1);  // [M]
  if (poison)
    picked = where(logical_not(bad), picked, Scalar(std::numeric_limits<double>::quiet_NaN()));
  Tensor w = valid.to(log_probs.dtype());
  Tensor loss = neg(picked) * w;
  switch (reduction) {
    case Reduction::none:
      return loss.reshape(per_sample);
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      break;
  }
  return sum(loss) / sum(w);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight, Reduction reduction,
                                        const Tensor& pos_weight) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::binary_cross_entropy_with_logits>(
          input, target, weight, pos_weight))
    return binary_cross_entropy_with_logits(ac[0], ac[1], ac[2], reduction, ac[3]);
  constexpr std::string_view op = "binary_cross_entropy_with_logits";
  MINIDL_CHECK(input.defined() && target.defined(), "op `", op, "`: undefined input");
  MINIDL_CHECK(input.is_floating_point() && target.is_floating_point(), "op `", op,
               "`: expected floating input and target, got dtypes ", input.dtype(), " and ",
               target.dtype());
  MINIDL_CHECK(input.shape() == target.shape(), "op `", op, "`: target shape ", target.shape_str(),
               " must be the same as input shape ", input.shape_str());
  for (const Tensor* t : {&weight, &pos_weight})
    MINIDL_CHECK(!(t->defined() && t->requires_grad() && GradMode::is_enabled()), "op `", op,
                 "`: not differentiable with respect to argument '",
                 t == &weight ? "weight" : "pos_weight",
                 "'. This input cannot have requires_grad True.");
  if (pos_weight.defined()) broadcast_shapes(pos_weight.shape(), input.shape(), op);
  // PyTorch's formula: sp = m + log(exp(-m) + exp(-x - m)) = -log(sigmoid(x)), m = max(-x, 0);
  // loss = (1 - y) x + (1 + (pos_weight - 1) y) sp.
  // Native ops: the node below is the only history. (1 - y) is computed as -y + 1 (bitwise the
  // same in IEEE arithmetic).
  const Tensor m = native::relu(native::neg(input));
  const Tensor sp =
      native::add(native::log(native::add(native::exp(native::neg(m)),
                                          native::exp(native::sub(native::neg(input), m)))),
                  m);
  const Tensor coef =
      pos_weight.defined()
          ? native::mul(native::add(native::mul(native::sub(pos_weight, 1.0), target), 1.0), sp)
          : sp;
  Tensor loss = native::add(native::mul(native::add(native::neg(target), 1.0), input), coef);
  if (weight.defined()) loss = native::mul(loss, weight);
  // One node with PyTorch's analytic gradients (also exact at x = 0: sigmoid(0) - y):
  //   dx = w ((1 + (pw - 1) y) sigmoid(x) - pw y),  dy = w (-x + (pw - 1) sp)   (pw = 1 if unset)
  autograd::record("BinaryCrossEntropyWithLogitsBackward", {input, target}, {&loss},
                   {input, target, weight, pos_weight},
                   [nx = input.requires_grad(), ny = target.requires_grad()](
                       const std::vector<Tensor>& g, const std::vector<Tensor>& s) {
                     const Tensor &x = s[0], &y = s[1], &w = s[2], &pw = s[3];
                     Tensor gw = w.defined() ? g[0] * w : g[0];
                     Tensor gx, gy;
                     if (nx) {
                       Tensor sig = sigmoid(x);
                       gx = pw.defined() ? ((pw - 1.0) * y + 1.0) * sig - pw * y : sig - y;
                       gx = (gx * gw).to(x.dtype());
                     }
                     if (ny) {
                       if (pw.defined()) {
                         Tensor m = relu(neg(x));
                         Tensor sp = log(exp(neg(m)) + exp(neg(x) - m)) + m;
                         gy = (neg(x) + (pw - 1.0) * sp) * gw;
                       } else {
                         gy = neg(x) * gw;
                       }
                       gy = gy.to(y.dtype());
                     }
                     return std::vector<Tensor>{gx, gy};
                   });
  return detail::reduce_loss(loss, reduction);
}

}  // namespace functional

CrossEntropyLoss::CrossEntropyLoss(Reduction r, int64_t ii, double ls)
    : ignore_index(ii), label_smoothing(ls) {
  MINIDL_CHECK(ls >= 0.0 && ls <= 1.0,
               "CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got ", ls);
  this->reduction = r;
}
Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& target) {
  return functional::cross_entropy(logits, target, reduction, ignore_index, label_smoothing);
}

NLLLoss::NLLLoss(Reduction r, int64_t ii) : ignore_index(ii) {
  this->reduction = r;
}
Tensor NLLLoss::forward(const Tensor& log_probs, const Tensor& target) {
  return functional::nll_loss(log_probs, target, reduction, ignore_index);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(Reduction r, Tensor pw) : pos_weight(std::move(pw)) {
  this->reduction = r;
  if (pos_weight.defined()) register_buffer("pos_weight", &pos_weight);
}
Tensor BCEWithLogitsLoss::forward(const Tensor& logits, const Tensor& target) {
  return functional::binary_cross_entropy_with_logits(logits, target, {}, reduction, pos_weight);
}

}  // namespace minidl::nn
