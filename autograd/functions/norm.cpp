// The differentiable layer_norm, add_layer_norm and batch_norm: the autocast hook, the raw op
// (tensor/ops/norm.cpp), then one fused node (grads for x, y, weight, bias; statistics and
// running stats get none).
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "tensor/mixed_dtype.h"

namespace minidl {

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& w,
                           const Tensor& b, double eps) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::layer_norm>(x, w, b))
    return layer_norm(ac[0], normalized_shape, ac[1], ac[2], eps);
  LayerNormResult res = native::layer_norm(x, normalized_shape, w, b, eps);
  const bool nx = x.requires_grad(), nw = w.defined() && w.requires_grad();
  const bool nb = b.defined() && b.requires_grad();
  autograd::record(
      "NativeLayerNormBackward", {x, w, b}, {&res.out}, {x, w, res.mean, res.rstd},
      [normalized_shape, nx, nw, nb](const auto& g, const auto& s) {
        LayerNormGrads lg =
            layer_norm_backward(g[0], s[0], normalized_shape, s[2], s[3], s[1], nw || nb);
        return std::vector<Tensor>{nx ? lg.grad_x : Tensor(), nw ? lg.grad_w : Tensor(),
                                   nb ? lg.grad_b : Tensor()};
      });
  return res;
}

namespace {

// The dtypes the fused kernel takes: the sum in x's dtype, y and out in it or (f32 x) 16-bit.
bool fused_dtypes(const Tensor& x, const Tensor& y, DType out) {
  return x.is_floating_point() && (!y.defined() || is_same_or_half(y.dtype(), x.dtype())) &&
         is_same_or_half(out, x.dtype());
}

}  // namespace

AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                                  const Tensor& w, const Tensor& b, double eps,
                                  std::optional<DType> out_dtype) {
  MINIDL_CHECK(x.defined(), "add_layer_norm: the input is undefined");
  const DType sum_dtype = y.defined() ? result_type(x, y) : x.dtype();
  const DType od = out_dtype.value_or(sum_dtype);
  if (!fused_dtypes(x, y, od) || sum_dtype != x.dtype()) {  // other mixes: the composite
    Tensor sum = y.defined() ? add(x, y) : x;
    LayerNormResult ln = layer_norm(sum, normalized_shape, w, b, eps);
    return {sum, ln.out.to(od), ln.mean, ln.rstd};
  }
  AddLayerNormResult res = native::add_layer_norm(x, y, normalized_shape, w, b, eps, od);
  const bool nx = x.requires_grad(), ny = y.defined() && y.requires_grad();
  const bool nw = w.defined() && w.requires_grad(), nb = b.defined() && b.requires_grad();
  const std::optional<DType> y_dtype =
      ny ? std::optional<DType>(y.dtype()) : std::optional<DType>();
  // With y: two outputs (sum, out); without, out only (sum is x itself).
  std::vector<Tensor*> outs =
      y.defined() ? std::vector<Tensor*>{&res.sum, &res.out} : std::vector<Tensor*>{&res.out};
  const bool has_sum = y.defined();
  autograd::record(
      "AddLayerNormBackward", {x, y, w, b}, outs, {res.sum, w, res.mean, res.rstd},
      [normalized_shape, nx, nw, nb, y_dtype, has_sum](const auto& g, const auto& s) {
        const Tensor& grad_sum = has_sum ? g[0] : Tensor();
        const Tensor& grad_out = has_sum ? g[1] : g[0];
        AddLayerNormGrads lg =
            add_layer_norm_backward(grad_out, grad_sum, s[0], normalized_shape, s[2], s[3], s[1],
                                    y_dtype, (nw || nb) && grad_out.defined());
        return std::vector<Tensor>{nx ? lg.grad_x : Tensor(), lg.grad_y, nw ? lg.grad_w : Tensor(),
                                   nb ? lg.grad_b : Tensor()};
      });
  return res;
}

BatchNormResult batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor running_mean,
                           Tensor running_var, bool training, double momentum, double eps) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::batch_norm>(x, w, b))  // not the stats
    return batch_norm(ac[0], ac[1], ac[2], running_mean, running_var, training, momentum, eps);
  // running stats, if any, are updated in place when training
  BatchNormResult res =
      native::batch_norm(x, w, b, running_mean, running_var, training, momentum, eps);
  // batch stats: the backward uses save_mean/save_invstd; eval: the running stats (constants)
  const bool batch_stats = training || !running_mean.defined();
  const bool nx = x.requires_grad(), nw = w.defined() && w.requires_grad();
  const bool nb = b.defined() && b.requires_grad();
  Tensor rm = batch_stats ? Tensor() : running_mean, rv = batch_stats ? Tensor() : running_var;
  autograd::record(
      "NativeBatchNormBackward", {x, w, b}, {&res.out},
      {x, w, rm, rv, res.save_mean, res.save_invstd},
      [batch_stats, eps, nx, nw, nb](const auto& g, const auto& s) {
        BatchNormGrads bg =
            batch_norm_backward(g[0], s[0], s[1], s[2], s[3], s[4], s[5], batch_stats, eps);
        return std::vector<Tensor>{nx ? bg.grad_x : Tensor(), nw ? bg.grad_w : Tensor(),
                                   nb ? bg.grad_b : Tensor()};
      });
  return res;
}

}  // namespace minidl
