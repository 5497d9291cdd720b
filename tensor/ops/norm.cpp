// Raw normalisation ops: layer_norm and batch_norm (forward + backward). Validate shapes,
// dtypes and devices, allocate outputs, dispatch to the kernels; no history (the
// differentiable forwards are autograd/functions/norm.cpp).
#include "tensor/dispatch.h"
#include "tensor/mixed_dtype.h"
#include "tensor/ops.h"

namespace minidl {
namespace native {
namespace {

// Saved statistics dtype: f64 for f64 inputs, f32 otherwise.
DType stat_dtype(DType x) {
  return x == kFloat64 ? kFloat64 : kFloat32;
}

void check_same_device(std::string_view op, const Tensor& x, const Tensor& t,
                       std::string_view what) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.device() == x.device(), "op `", op, "`: ", what, " is on ", t.device(),
               " but the input is on ", x.device());
}

void check_floating(std::string_view op, const Tensor& t, std::string_view what) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.is_floating_point(), "op `", op, "`: expected a floating ", what, ", got dtype ",
               t.dtype());
}

// Number of rows R and row length D for x normalised over `ns` (trailing dims).
std::pair<int64_t, int64_t> layer_norm_rows(std::string_view op, const Tensor& x, const Shape& ns) {
  MINIDL_CHECK(!ns.empty(), "op `", op,
               "`: expected normalized_shape to be at least 1-dimensional, got []");
  const int64_t k = int64_t(ns.size());
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == ns[size_t(i)];
  MINIDL_CHECK(ok, "op `", op, "`: given normalized_shape=", shape_str(ns),
               ", expected input with shape [*, ", shape_str(ns).substr(1),
               ", but got input of shape ", x.shape_str());
  int64_t R = 1;
  for (int64_t i = 0; i < x.dim() - k; ++i) R *= x.size(i);
  return {R, shape_numel(ns)};
}

// Validates batch_norm's per-channel tensors ([C], floating, same device).
void check_channel_params(std::string_view op, const Tensor& x,
                          std::initializer_list<std::pair<const Tensor*, const char*>> ts) {
  const int64_t C = x.size(1);
  for (const auto& [t, name] : ts) {
    if (!t->defined()) continue;
    MINIDL_CHECK(t->dim() == 1 && t->size(0) == C, "op `", op, "`: ", name, " should contain ", C,
                 " elements (channels of input ", x.shape_str(), "), got shape ", t->shape_str());
    check_floating(op, *t, name);
    check_same_device(op, x, *t, name);
  }
}

void check_bn_input(std::string_view op, const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() >= 2, "op `", op,
               "`: expected input of shape [N, C] or [N, C, *], got ",
               x.defined() ? x.shape_str() : "undefined");
  check_floating(op, x, "input");
}

// layer_norm's weight and bias (either may be undefined): normalized_shape, floating, x's device.
void check_ln_params(std::string_view op, const Tensor& x, const Shape& ns, const Tensor& w,
                     const Tensor& b) {
  for (const auto& [t, name] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}}) {
    if (!t->defined()) continue;
    MINIDL_CHECK(t->shape() == ns, "op `", op, "`: expected ", name,
                 " of the same shape as normalized_shape=", shape_str(ns), ", got ", name,
                 " of shape ", t->shape_str());
    check_floating(op, *t, name);
    check_same_device(op, x, *t, name);
  }
}

// A layer_norm backward's saved tensors: mean and rstd with R elements, the weight's shape, all
// on x's device.
void check_ln_saved(std::string_view op, const Tensor& x, const Shape& ns, int64_t R,
                    const Tensor& mean, const Tensor& rstd, const Tensor& w) {
  for (const auto& [t, name] : {std::pair{&mean, "mean"}, std::pair{&rstd, "rstd"}}) {
    MINIDL_CHECK(t->defined() && t->numel() == R, "op `", op, "`: expected ", name, " with ", R,
                 " elements (one per row), got ", t->defined() ? t->shape_str() : "undefined");
    check_same_device(op, x, *t, name);
  }
  if (w.defined())
    MINIDL_CHECK(w.shape() == ns, "op `", op, "`: weight shape ", w.shape_str(),
                 " does not match normalized_shape=", shape_str(ns));
  check_same_device(op, x, w, "weight");
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& w,
                           const Tensor& b, double eps) {
  constexpr std::string_view op = "layer_norm";
  MINIDL_CHECK(x.defined(), "op `layer_norm`: input is undefined");
  check_floating(op, x, "input");
  auto [R, D] = layer_norm_rows(op, x, normalized_shape);
  check_ln_params(op, x, normalized_shape, w, b);
  Tensor xc = reshape(contiguous(x), {R, D});
  Tensor out = empty({R, D}, x.dtype(), x.device());
  Tensor mean = empty({R}, stat_dtype(x.dtype()), x.device());
  Tensor rstd = empty({R}, stat_dtype(x.dtype()), x.device());
  kernel<Op::layer_norm>(x.device())(xc, w, b, out, mean, rstd, D, eps);
  return {view(out, x.shape()), mean, rstd};
}

LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                   const Shape& normalized_shape, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& w, bool need_grad_w_b) {
  constexpr std::string_view op = "layer_norm_backward";
  check_floating(op, x, "input");
  auto [R, D] = layer_norm_rows(op, x, normalized_shape);
  MINIDL_CHECK(grad_out.shape() == x.shape(), "op `layer_norm_backward`: grad_out shape ",
               grad_out.shape_str(), " does not match input shape ", x.shape_str());
  const DType sd = stat_dtype(x.dtype());
  check_ln_saved(op, x, normalized_shape, R, mean, rstd, w);
  check_same_device(op, x, grad_out, "grad_out");
  Tensor g = reshape(contiguous(to(grad_out, x.dtype())), {R, D});
  Tensor xc = reshape(contiguous(x), {R, D});
  Tensor m = reshape(contiguous(to(mean, sd)), {R});
  Tensor rs = reshape(contiguous(to(rstd, sd)), {R});
  LayerNormGrads res;
  Tensor grad_x = empty({R, D}, x.dtype(), x.device());
  if (need_grad_w_b) {
    const DType pd = w.defined() ? w.dtype() : x.dtype();
    res.grad_w = empty(normalized_shape, pd, x.device());
    res.grad_b = empty(normalized_shape, pd, x.device());
  }
  kernel<Op::layer_norm_backward>(x.device())(g, xc, m, rs, w, grad_x, res.grad_w, res.grad_b, D);
  res.grad_x = view(grad_x, x.shape());
  return res;
}

AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                                  const Tensor& w, const Tensor& b, double eps, DType out_dtype) {
  constexpr std::string_view op = "add_layer_norm";
  MINIDL_CHECK(x.defined(), "op `add_layer_norm`: input is undefined");
  check_floating(op, x, "input");
  if (y.defined()) {
    MINIDL_CHECK(y.shape() == x.shape(), "op `add_layer_norm`: the residual ", y.shape_str(),
                 " and the input ", x.shape_str(), " must have one shape (no broadcasting)");
    check_same_device(op, x, y, "the residual");
  }
  auto [R, D] = layer_norm_rows(op, x, normalized_shape);
  check_ln_params(op, x, normalized_shape, w, b);
  // The dtype rules (y and out: x's dtype, or 16-bit where x is f32) are the kernels'.
  AddLayerNormResult res;
  Tensor xc = reshape(contiguous(x), {R, D});
  Tensor yc = y.defined() ? reshape(contiguous(y), {R, D}) : Tensor();
  Tensor sum = y.defined() ? empty({R, D}, x.dtype(), x.device()) : Tensor();
  Tensor out = empty({R, D}, out_dtype, x.device());
  res.mean = empty({R}, stat_dtype(x.dtype()), x.device());
  res.rstd = empty({R}, stat_dtype(x.dtype()), x.device());
  kernel<Op::add_layer_norm>(x.device())(xc, yc, w, b, sum, out, res.mean, res.rstd, D, eps);
  res.sum = y.defined() ? view(sum, x.shape()) : x;
  res.out = view(out, x.shape());
  return res;
}

AddLayerNormGrads add_layer_norm_backward(const Tensor& grad_out, const Tensor& grad_sum,
                                          const Tensor& s, const Shape& normalized_shape,
                                          const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                          std::optional<DType> y_dtype, bool need_grad_w_b) {
  constexpr std::string_view op = "add_layer_norm_backward";
  check_floating(op, s, "input");
  auto [R, D] = layer_norm_rows(op, s, normalized_shape);
  MINIDL_CHECK(grad_out.defined() || grad_sum.defined(),
               "op `add_layer_norm_backward`: needs grad_out, grad_sum or both");
  for (const auto& [t, name] :
       {std::pair{&grad_out, "grad_out"}, std::pair{&grad_sum, "grad_sum"}}) {
    if (!t->defined()) continue;
    MINIDL_CHECK(t->shape() == s.shape(), "op `add_layer_norm_backward`: ", name, " shape ",
                 t->shape_str(), " does not match input shape ", s.shape_str());
    check_same_device(op, s, *t, name);
  }
  const DType sd = stat_dtype(s.dtype());
  check_ln_saved(op, s, normalized_shape, R, mean, rstd, w);
  AddLayerNormGrads res;
  // Only grad_sum: no normalisation term, the gradient passes through the add.
  if (!grad_out.defined()) {
    res.grad_x = to(grad_sum, s.dtype());
    if (y_dtype) res.grad_y = to(grad_sum, *y_dtype);
    return res;
  }
  // grad_out stays 16-bit where the kernel reads it so (an f32 sum's 16-bit out).
  const bool g_native = is_same_or_half(grad_out.dtype(), s.dtype());
  Tensor g = reshape(contiguous(g_native ? grad_out : to(grad_out, s.dtype())), {R, D});
  Tensor gs = grad_sum.defined() ? reshape(contiguous(to(grad_sum, s.dtype())), {R, D}) : Tensor();
  Tensor sc = reshape(contiguous(s), {R, D});
  Tensor m = reshape(contiguous(to(mean, sd)), {R});
  Tensor rs = reshape(contiguous(to(rstd, sd)), {R});
  Tensor grad_x = empty({R, D}, s.dtype(), s.device());
  Tensor grad_y = y_dtype ? empty({R, D}, *y_dtype, s.device()) : Tensor();
  if (need_grad_w_b) {
    const DType pd = w.defined() ? w.dtype() : s.dtype();
    res.grad_w = empty(normalized_shape, pd, s.device());
    res.grad_b = empty(normalized_shape, pd, s.device());
  }
  kernel<Op::add_layer_norm_backward>(s.device())(g, gs, sc, m, rs, w, grad_x, grad_y, res.grad_w,
                                                  res.grad_b, D);
  res.grad_x = view(grad_x, s.shape());
  if (y_dtype) res.grad_y = view(grad_y, s.shape());
  return res;
}

// Batch statistics when training (running stats, if any, updated in place by the kernel) or
// when there are no running stats; otherwise the running stats normalise (eval).
BatchNormResult batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor running_mean,
                           Tensor running_var, bool training, double momentum, double eps) {
  constexpr std::string_view op = "batch_norm";
  check_bn_input(op, x);
  check_channel_params(op, x,
                       {{&w, "weight"},
                        {&b, "bias"},
                        {&running_mean, "running_mean"},
                        {&running_var, "running_var"}});
  MINIDL_CHECK(running_mean.defined() == running_var.defined(),
               "op `batch_norm`: running_mean and running_var must both be defined or both "
               "undefined");
  const bool batch_stats = training || !running_mean.defined();
  const int64_t C = x.size(1);
  if (training) {
    const int64_t per_channel = C == 0 ? 0 : x.numel() / C;
    MINIDL_CHECK(per_channel != 1,
                 "op `batch_norm`: Expected more than 1 value per channel when training, got "
                 "input of shape ",
                 x.shape_str());
  }
  Tensor xc = contiguous(x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const DType sd = stat_dtype(x.dtype());
  Tensor save_mean = empty({batch_stats ? C : 0}, sd, x.device());
  Tensor save_invstd = empty({batch_stats ? C : 0}, sd, x.device());
  kernel<Op::batch_norm>(x.device())(xc, w, b, running_mean, running_var, out, save_mean,
                                     save_invstd, batch_stats, momentum, eps);
  return {out, save_mean, save_invstd};
}

BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   bool training, double eps) {
  constexpr std::string_view op = "batch_norm_backward";
  check_bn_input(op, x);
  MINIDL_CHECK(grad_out.shape() == x.shape(), "op `batch_norm_backward`: grad_out shape ",
               grad_out.shape_str(), " does not match input shape ", x.shape_str());
  check_same_device(op, x, grad_out, "grad_out");
  check_channel_params(
      op, x, {{&w, "weight"}, {&running_mean, "running_mean"}, {&running_var, "running_var"}});
  const bool batch_stats = training || !running_mean.defined() || !running_var.defined();
  const DType sd = stat_dtype(x.dtype());
  Tensor sm, si;
  if (batch_stats) {
    check_channel_params(op, x, {{&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}});
    MINIDL_CHECK(save_mean.defined() && save_invstd.defined(),
                 "op `batch_norm_backward`: training mode needs save_mean and save_invstd");
    sm = to(save_mean, sd);
    si = to(save_invstd, sd);
  }
  Tensor g = contiguous(to(grad_out, x.dtype()));
  Tensor xc = contiguous(x);
  const DType pd = w.defined() ? w.dtype() : x.dtype();
  BatchNormGrads res;
  res.grad_x = empty(x.shape(), x.dtype(), x.device());
  res.grad_w = empty({x.size(1)}, pd, x.device());
  res.grad_b = empty({x.size(1)}, pd, x.device());
  kernel<Op::batch_norm_backward>(x.device())(g, xc, w, running_mean, running_var, sm, si,
                                              res.grad_x, res.grad_w, res.grad_b, batch_stats, eps);
  return res;
}

}  // namespace native
}  // namespace minidl
