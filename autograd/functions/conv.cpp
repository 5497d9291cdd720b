// The differentiable conv2d, conv_transpose2d and 2-D max/avg pooling: each runs its raw op
// (tensor/ops/conv.cpp) and records one fused autograd node (convolutions with the autocast
// hook first).
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

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
                        const std::array<int64_t, 2>& output_padding) {
  // torch's autocast lists conv_transpose2d with conv2d's policy (lower precision, both devices)
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::conv2d>(x, w, bias))
    return conv_transpose2d(ac[0], ac[1], ac[2], p, output_padding);
  constexpr std::string_view op = "conv_transpose2d";
  MINIDL_CHECK(x.defined() && w.defined(), "op `", op, "`: undefined input or weight");
  MINIDL_CHECK(x.dim() == 3 || x.dim() == 4, "op `", op,
               "`: expected a 3-D [C,H,W] or 4-D [N,C,H,W] input, got ", x.shape_str());
  MINIDL_CHECK(w.dim() == 4, "op `", op, "`: expected a 4-D weight [in, out/groups, kh, kw], got ",
               w.shape_str());
  MINIDL_CHECK(p.groups > 0, "op `", op, "`: groups must be positive, got ", p.groups);
  const bool unbatched = x.dim() == 3;
  const int64_t c_in = x.size(unbatched ? 0 : 1), c_out = w.size(1) * p.groups;
  MINIDL_CHECK(w.size(0) == c_in, "op `", op, "`: input of shape ", x.shape_str(), " has ", c_in,
               " channels but weight of shape ", w.shape_str(), " expects ", w.size(0));
  MINIDL_CHECK(c_in % p.groups == 0, "op `", op, "`: input channels ", c_in,
               " not divisible by groups ", p.groups);
  Shape out_shape = x.shape();
  out_shape[unbatched ? 0 : 1] = c_out;
  // conv2d's input gradient from xp: x zero-extended at the bottom/right to the conv2d output
  // size of out_shape (larger than x's when output_padding >= stride, e.g. stride 1 with
  // dilation 2: the extra rows take no part, as in torch)
  Shape xp_shape = x.shape();
  for (int i = 0; i < 2; ++i) {
    const int64_t s = p.stride[i], d = p.dilation[i], o = output_padding[size_t(i)];
    const int64_t k = w.size(2 + i), pad = p.padding[i];
    MINIDL_CHECK(s > 0 && d > 0 && pad >= 0, "op `", op, "`: invalid stride, dilation or padding");
    MINIDL_CHECK(o >= 0 && (o < s || o < d), "op `", op, "`: output_padding (", o,
                 ") must be smaller than either stride (", s, ") or dilation (", d, ")");
    const int64_t in = x.size(-2 + i);
    const int64_t out = (in - 1) * s - 2 * pad + d * (k - 1) + o + 1;
    MINIDL_CHECK(out > 0, "op `", op, "`: input of shape ", x.shape_str(), " with weight ",
                 w.shape_str(), " gives a non-positive output size ", out);
    out_shape[out_shape.size() - 2 + size_t(i)] = out;
    xp_shape[xp_shape.size() - 2 + size_t(i)] = (out + 2 * pad - d * (k - 1) - 1) / s + 1;
  }
  Tensor xp = x;
  if (xp_shape != x.shape()) {
    xp = zeros(xp_shape, x.dtype(), x.device());
    native::copy_(native::narrow(native::narrow(xp, -2, 0, x.size(-2)), -1, 0, x.size(-1)), x);
  }
  Tensor res = native::conv2d_backward_input(xp, w, out_shape, p);
  if (bias.defined()) {
    MINIDL_CHECK(bias.dim() == 1 && bias.size(0) == c_out && bias.dtype() == x.dtype(), "op `", op,
                 "`: expected a bias of shape [", c_out, "] and dtype ", x.dtype(), ", got ",
                 bias.shape_str(), " ", bias.dtype());
    res = native::add(res, native::reshape(bias, {c_out, 1, 1}));
  }
  const bool nx = x.requires_grad(), nw = w.requires_grad();
  const bool nb = bias.defined() && bias.requires_grad();
  const int64_t h = x.size(-2), wd = x.size(-1);
  autograd::record("ConvTranspose2dBackward", {x, w, bias}, {&res}, {xp, w},
                   [p, nx, nw, nb, unbatched, h, wd](const auto& g, const auto& s) {
                     std::vector<Tensor> r(3);
                     if (nx) {  // the rows/columns of the zero extension dropped
                       Tensor gx = native::conv2d(g[0], s[1], {}, p);
                       r[0] = native::narrow(native::narrow(gx, -2, 0, h), -1, 0, wd);
                     }
                     if (nw) r[1] = conv2d_backward_weight(s[0], g[0], s[1].shape(), p);
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
