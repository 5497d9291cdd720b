// The differentiable layer_norm and batch_norm: the autocast hook, the raw op
// (tensor/ops/norm.cpp), then one fused node on `out` (grads for x, weight, bias; statistics
// and running stats get none).
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

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
