// Raw fused classifier loss (llm.c's fused_classifier): the mean cross-entropy over the first V
// of Vp columns and, in the same pass, the logits' gradient written over the logits; its
// backward scales that buffer by the upstream gradient in place. No history here (the
// differentiable form is nn/fused_cross_entropy.cpp).
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl {
namespace native {
namespace {

// Validates logits:[N,Vp] / [B,T,Vp] and target (N elements) -> (logits [N,Vp], target [N]).
std::pair<Tensor, Tensor> fused_ce_rows(std::string_view op, const Tensor& logits,
                                        const Tensor& target, int64_t num_classes) {
  MINIDL_CHECK(logits.defined() && target.defined(), "op `", op, "`: undefined input");
  MINIDL_CHECK(logits.is_floating_point(), "op `", op, "`: expected floating logits, got dtype ",
               logits.dtype());
  MINIDL_CHECK(target.dtype() == kInt64, "op `", op, "`: expected int64 target (class indices), ",
               "got dtype ", target.dtype());
  MINIDL_CHECK(logits.dim() >= 2, "op `", op, "`: expected logits [N, Vp] or [B, T, Vp], got ",
               logits.shape_str());
  MINIDL_CHECK(logits.is_contiguous(), "op `", op, "`: expected contiguous logits (rows of Vp ",
               "elements), got shape ", logits.shape_str(), " with strides ",
               shape_str(logits.strides()),
               " (a slice logits[..., :V] is not: pass the padded tensor and num_classes = V)");
  MINIDL_CHECK(target.device() == logits.device(), "op `", op, "`: target is on ", target.device(),
               " but logits are on ", logits.device());
  const int64_t Vp = logits.size(-1), N = Vp > 0 ? logits.numel() / Vp : 0;
  MINIDL_CHECK(num_classes >= 1 && num_classes <= Vp, "op `", op, "`: num_classes ", num_classes,
               " must be in [1, ", Vp, "] (the logits' last dim; logits ", logits.shape_str(), ")");
  Shape rows_shape(logits.shape().begin(), logits.shape().end() - 1);
  MINIDL_CHECK(target.numel() == N && (target.shape() == rows_shape || target.dim() == 1), "op `",
               op, "`: target shape ", target.shape_str(), " does not match logits shape ",
               logits.shape_str(), " (expected ", shape_str(rows_shape), " or [", N, "])");
  return {view(logits, {N, Vp}), reshape(contiguous(target), {N})};
}

Tensor run_fused(const Tensor& logits, const Tensor& target, int64_t num_classes,
                 int64_t ignore_index, bool write_grad) {
  const std::string_view op = write_grad ? "fused_cross_entropy_" : "fused_cross_entropy";
  auto [x, t] = fused_ce_rows(op, logits, target, num_classes);
  Tensor loss = empty({}, logits.dtype() == kFloat64 ? kFloat64 : kFloat32, logits.device());
  FusedCrossEntropyParams p{num_classes, ignore_index, write_grad};
  kernel<Op::fused_cross_entropy>(logits.device())(x, t, loss, p);
  if (write_grad) logits.storage()->bump_version();
  return loss;
}

}  // namespace

Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, int64_t num_classes,
                           int64_t ignore_index) {
  return run_fused(logits, target, num_classes, ignore_index, /*write_grad=*/false);
}

Tensor fused_cross_entropy_(Tensor& logits, const Tensor& target, int64_t num_classes,
                            int64_t ignore_index) {
  return run_fused(logits, target, num_classes, ignore_index, /*write_grad=*/true);
}

Tensor& fused_cross_entropy_backward_(Tensor& grad, const Tensor& grad_loss) {
  constexpr std::string_view op = "fused_cross_entropy_backward_";
  MINIDL_CHECK(grad.defined() && grad.is_floating_point() && grad.is_contiguous(), "op `", op,
               "`: expected the contiguous floating buffer fused_cross_entropy_ wrote, got ",
               grad.defined() ? grad.shape_str() : "undefined");
  MINIDL_CHECK(grad_loss.defined() && grad_loss.numel() == 1 && grad_loss.is_floating_point(),
               "op `", op, "`: expected a one-element floating grad_loss, got ",
               grad_loss.defined() ? grad_loss.shape_str() : "undefined");
  MINIDL_CHECK(grad_loss.device() == grad.device(), "op `", op, "`: grad_loss is on ",
               grad_loss.device(), " but the gradient buffer is on ", grad.device());
  // f32 (f64 for f64 buffers) keeps the upstream scale unrounded for f16/bf16 buffers.
  const Tensor g = reshape(to(grad_loss, grad.dtype() == kFloat64 ? kFloat64 : kFloat32), {});
  if (grad.numel() > 0) kernel<Op::fused_cross_entropy_backward>(grad.device())(grad, g);
  grad.storage()->bump_version();
  return grad;
}

}  // namespace native
}  // namespace minidl
