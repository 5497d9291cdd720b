// Raw cross_entropy (log_softmax + nll with ignore_index and label smoothing, PyTorch semantics)
// forward and backward; no history (the differentiable op is autograd/functions/loss.cpp).
// Logits [N,C,d1..] are moved to [M,C] rows; class-probability targets compute torch's composite.
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl {
namespace native {
namespace {

struct CeLayout {
  int64_t M = 0, C = 0;
  Shape per_sample;  // target's shape: [N, d1, ...] ([] for unbatched [C] logits)
};

// Validates logits/target and returns the row layout.
CeLayout ce_layout(std::string_view op, const Tensor& logits, const Tensor& target,
                   double label_smoothing) {
  MINIDL_CHECK(logits.defined() && target.defined(), "op `", op, "`: undefined input");
  MINIDL_CHECK(logits.is_floating_point(), "op `", op, "`: expected floating logits, got dtype ",
               logits.dtype());
  MINIDL_CHECK(target.dtype() == kInt64, "op `", op,
               "`: expected target of dtype int64 (class indices), got ", target.dtype(),
               " (a floating target holds class probabilities only with the logits' shape ",
               logits.shape_str(), ")");
  MINIDL_CHECK(logits.dim() >= 1, "op `", op, "`: expected logits of shape [C], [N, C] or ",
               "[N, C, d1, ...], got ", logits.shape_str());
  MINIDL_CHECK(target.device() == logits.device(), "op `", op, "`: target is on ", target.device(),
               " but logits are on ", logits.device());
  MINIDL_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "op `", op,
               "`: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  CeLayout l;
  if (logits.dim() == 1) {
    l.C = logits.size(0);
  } else {
    l.C = logits.size(1);
    l.per_sample = logits.shape();
    l.per_sample.erase(l.per_sample.begin() + 1);
  }
  MINIDL_CHECK(target.shape() == l.per_sample, "op `", op, "`: target shape ", target.shape_str(),
               " does not match logits shape ", logits.shape_str(), " (expected target shape ",
               shape_str(l.per_sample), ")");
  l.M = shape_numel(l.per_sample);
  return l;
}

// logits -> contiguous [M, C] rows (class dim moved last).
Tensor logits_rows(const Tensor& logits, const CeLayout& l) {
  if (logits.dim() <= 2) return reshape(contiguous(logits), {l.M, l.C});
  DimList perm{0};
  for (int64_t d = 2; d < logits.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return reshape(contiguous(permute(logits, perm)), {l.M, l.C});
}

// Number of non-ignored targets as a 0-d int64 tensor.
Tensor count_valid(const Tensor& target_rows, int64_t ignore_index) {
  return sum(ne(target_rows, Scalar(ignore_index)));
}

DType lse_dtype(DType x) {
  return x == kFloat64 ? kFloat64 : kFloat32;
}

// Index targets: per-sample losses and log-sum-exp, then the reduction.
CrossEntropyResult cross_entropy_index_target(const Tensor& logits, const Tensor& target,
                                              const CeLayout& l, Reduction reduction,
                                              int64_t ignore_index, double label_smoothing) {
  Tensor x = logits_rows(logits, l);
  Tensor t = reshape(contiguous(target), {l.M});
  Tensor loss = empty({l.M}, logits.dtype(), logits.device());
  Tensor lse = empty({l.M}, lse_dtype(logits.dtype()), logits.device());
  CrossEntropyParams p{ignore_index, label_smoothing};
  kernel<Op::cross_entropy>(logits.device())(x, t, loss, lse, p);
  CrossEntropyResult res;
  res.lse = view(lse, l.per_sample);
  switch (reduction) {
    case Reduction::none:
      res.loss = view(loss, l.per_sample);
      break;
    case Reduction::sum:
      res.loss = sum(loss);
      break;
    // all targets ignored (or none at all): 0/0 = nan, as PyTorch
    case Reduction::mean:
      res.loss = div(sum(loss), count_valid(t, ignore_index));
      break;
  }
  return res;
}

// Class-probability targets (floating target of the logits' shape): the value of torch 1.13's
// composite cross_entropy_loss_prob_target, from raw ops (autograd/functions/loss.cpp builds the
// same from the differentiable ops): loss = -sum_c t_c * log_softmax(logits)_c with
// t = target (1 - ls) + ls / C; mean divides by N*d1*... (the number of class rows), as torch.
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
  // torch's rule: a target of the logits' shape holds class probabilities
  if (target.defined() && logits.defined() && target.is_floating_point() &&
      target.shape() == logits.shape())
    return {cross_entropy_prob_target(logits, target, reduction, ignore_index, label_smoothing),
            Tensor()};
  const CeLayout l = ce_layout("cross_entropy", logits, target, label_smoothing);
  return cross_entropy_index_target(logits, target, l, reduction, ignore_index, label_smoothing);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  return cross_entropy_forward(logits, target, reduction, ignore_index, label_smoothing).loss;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, Reduction reduction, int64_t ignore_index,
                              double label_smoothing) {
  const CeLayout l = ce_layout("cross_entropy_backward", logits, target, label_smoothing);
  MINIDL_CHECK(lse.defined() && lse.numel() == l.M, "op `cross_entropy_backward`: expected lse ",
               "with ", l.M, " elements (one per sample), got ",
               lse.defined() ? lse.shape_str() : "undefined");
  MINIDL_CHECK(grad_loss.defined() && grad_loss.device() == logits.device(),
               "op `cross_entropy_backward`: grad_loss must be defined and on ", logits.device());
  if (reduction == Reduction::none)
    MINIDL_CHECK(grad_loss.shape() == l.per_sample, "op `cross_entropy_backward`: grad_loss ",
                 "shape ", grad_loss.shape_str(), " does not match the per-sample loss shape ",
                 shape_str(l.per_sample));
  else
    MINIDL_CHECK(grad_loss.numel() == 1, "op `cross_entropy_backward`: expected a one-element ",
                 "grad_loss for a reduced loss, got shape ", grad_loss.shape_str());
  Tensor x = logits_rows(logits, l);
  Tensor t = reshape(contiguous(target), {l.M});
  Tensor s = reshape(contiguous(to(lse, lse_dtype(logits.dtype()))), {l.M});
  // per-sample upstream gradient [M] (may be a stride-0 expansion)
  Tensor g;
  switch (reduction) {
    case Reduction::none:
      g = reshape(contiguous(to(grad_loss, logits.dtype())), {l.M});
      break;
    case Reduction::sum:
      g = expand(reshape(to(grad_loss, logits.dtype()), {}), {l.M});
      break;
    case Reduction::mean:
      g = expand(to(div(reshape(grad_loss, {}), count_valid(t, ignore_index)), logits.dtype()),
                 {l.M});
      break;
  }
  Tensor grad = empty({l.M, l.C}, logits.dtype(), logits.device());
  CrossEntropyParams p{ignore_index, label_smoothing};
  kernel<Op::cross_entropy_backward>(logits.device())(g, x, t, s, grad, p);
  if (logits.dim() <= 2) return view(grad, logits.shape());
  // [M, C] -> [N, d1.., C] -> [N, C, d1..]
  Shape moved = l.per_sample;
  moved.push_back(l.C);
  DimList perm{0, logits.dim() - 1};
  for (int64_t d = 1; d < logits.dim() - 1; ++d) perm.push_back(d);
  return contiguous(permute(view(grad, moved), perm));
}

}  // namespace native
}  // namespace minidl
