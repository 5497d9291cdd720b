// The differentiable conv2d and 2-D max/avg pooling: each runs its raw op (tensor/ops_conv.cpp)
// and records one fused autograd node (conv2d with the autocast hook first).
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::conv2d>(x, w, bias))
    return conv2d(ac[0], ac[1], ac[2], p);
  Tensor res = native::conv2d(x, w, bias, p);
  // grads: x via conv2d_backward_input, w via conv2d_backward_weight, bias = sum over N,H,W
  const bool nx = x.requires_grad(), nw = w.requires_grad();
  const bool nb = bias.defined() && bias.requires_grad();
  const bool unbatched = x.dim() == 3;
  autograd::record("Conv2dBackward", {x, w, bias}, {&res}, {x, w},
                   [p, nx, nw, nb, unbatched](const auto& g, const auto& s) {
                     std::vector<Tensor> r(3);
                     if (nx) r[0] = conv2d_backward_input(g[0], s[1], s[0].shape(), p);
                     if (nw) r[1] = conv2d_backward_weight(g[0], s[0], s[1].shape(), p);
                     if (nb) r[2] = sum(g[0], unbatched ? DimList{1, 2} : DimList{0, 2, 3});
                     return r;
                   });
  return res;
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p) {
  std::pair<Tensor, Tensor> res = native::max_pool2d_with_indices(x, p);
  // values only get history; the indices are saved for the backward
  const Shape x_shape = x.shape();
  autograd::record("MaxPool2DWithIndicesBackward", {x}, {&res.first}, {res.second},
                   [p, x_shape](const auto& g, const auto& s) {
                     return std::vector<Tensor>{max_pool2d_backward(g[0], s[0], x_shape, p)};
                   });
  return res;
}

// Only a graph needs the indices: recording takes the indexed path, inference the raw op (which
// skips the int64 indices on CPU).
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  if (x.defined() && GradMode::is_enabled() && x.requires_grad())
    return max_pool2d_with_indices(x, p).first;
  return native::max_pool2d(x, p);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  Tensor res = native::avg_pool2d(x, p);
  const Shape x_shape = x.shape();
  autograd::record("AvgPool2DBackward", {x}, {&res}, {}, [p, x_shape](const auto& g, const auto&) {
    return std::vector<Tensor>{avg_pool2d_backward(g[0], x_shape, p)};
  });
  return res;
}

}  // namespace minidl
