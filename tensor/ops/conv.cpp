// Raw conv2d and 2-D max/avg pooling (NCHW, PyTorch semantics): argument and shape validation,
// output sizes (floor / ceil_mode), 3-D unbatched inputs, dispatch to the kernels; no history
// (the differentiable ops are autograd/functions/conv.cpp).
#include <string>

#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl {
namespace native {
namespace {

std::string pair_str(const int64_t* v) {
  return detail::concat("(", v[0], ", ", v[1], ")");
}

void check_floating(std::string_view op, const Tensor& t, std::string_view name) {
  MINIDL_CHECK(t.defined(), "op `", op, "`: ", name, " is an undefined tensor");
  MINIDL_CHECK(is_floating(t.dtype()), "op `", op, "`: expected a floating ", name, ", got dtype ",
               t.dtype(), " (", name, " of shape ", t.shape_str(), ")");
}

// b must be defined, have a's dtype and live on a's device.
void check_same(std::string_view op, const Tensor& a, std::string_view an, const Tensor& b,
                std::string_view bn) {
  MINIDL_CHECK(b.defined(), "op `", op, "`: ", bn, " is an undefined tensor");
  MINIDL_CHECK(a.dtype() == b.dtype(), "op `", op, "`: ", an, " dtype ", a.dtype(), " and ", bn,
               " dtype ", b.dtype(), " must be the same (", an, " ", a.shape_str(), ", ", bn, " ",
               b.shape_str(), ")");
  MINIDL_CHECK(a.device() == b.device(), "op `", op, "`: ", an, " is on ", a.device(), " but ", bn,
               " is on ", b.device());
}

// Input shape as 4-D [N,C,H,W] (3-D [C,H,W] gets a batch of 1); checks rank and sizes.
Shape batched_shape(std::string_view op, const Shape& s, std::string_view name) {
  MINIDL_CHECK(s.size() == 3 || s.size() == 4, "op `", op,
               "`: expected 3-D (unbatched) or 4-D (batched) ", name, ", got ", name, " of shape ",
               shape_str(s));
  Shape b = s.size() == 3 ? Shape{1, s[0], s[1], s[2]} : s;
  MINIDL_CHECK(b[0] >= 0 && b[1] > 0 && b[2] > 0 && b[3] > 0, "op `", op, "`: expected non-zero ",
               "sizes in the non-batch dims of ", name, ", got ", name, " of shape ", shape_str(s));
  return b;
}

// ---- conv2d: checks params and shapes, returns the 4-D output shape [N,O,Ho,Wo].
Shape conv_output_shape(std::string_view op, const Shape& x, const Shape& xs_orig, const Shape& w,
                        const Conv2dParams& p) {
  for (int i = 0; i < 2; ++i) {
    MINIDL_CHECK(p.stride[i] > 0, "op `", op, "`: non-positive stride is not supported, got ",
                 "stride ", pair_str(p.stride));
    MINIDL_CHECK(p.padding[i] >= 0, "op `", op, "`: negative padding is not supported, got ",
                 "padding ", pair_str(p.padding));
    MINIDL_CHECK(p.dilation[i] > 0, "op `", op, "`: dilation should be greater than zero, got ",
                 "dilation ", pair_str(p.dilation));
  }
  MINIDL_CHECK(p.groups > 0, "op `", op,
               "`: non-positive groups is not supported, got groups=", p.groups);
  MINIDL_CHECK(w.size() == 4, "op `", op, "`: expected 4-D weight [O, C/groups, kh, kw], got ",
               "weight of shape ", shape_str(w));
  MINIDL_CHECK(w[0] > 0 && w[1] > 0 && w[2] > 0 && w[3] > 0, "op `", op,
               "`: expected non-zero sizes in weight, got weight of shape ", shape_str(w));
  MINIDL_CHECK(w[0] % p.groups == 0, "op `", op, "`: given groups=", p.groups,
               ", expected weight to be divisible by ", p.groups,
               " at dim 0 (output channels), got weight of shape ", shape_str(w));
  MINIDL_CHECK(x[1] % p.groups == 0, "op `", op, "`: given groups=", p.groups,
               ", expected the input channels to be divisible by ", p.groups, ", got input of ",
               "shape ", shape_str(xs_orig));
  MINIDL_CHECK(x[1] == w[1] * p.groups, "op `", op, "`: given groups=", p.groups,
               ", weight of shape ", shape_str(w), " expects input of shape ", shape_str(xs_orig),
               " to have ", w[1] * p.groups, " channels, got ", x[1], " channels");
  Shape out{x[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    int64_t eff = p.dilation[i] * (w[2 + i] - 1) + 1;
    out[2 + i] = (x[2 + i] + 2 * p.padding[i] - eff) / p.stride[i] + 1;
    if (x[2 + i] + 2 * p.padding[i] < eff) out[2 + i] = 0;
  }
  MINIDL_CHECK(out[2] > 0 && out[3] > 0, "op `", op, "`: calculated output size (", out[2], " x ",
               out[3], ") is too small: input of shape ", shape_str(xs_orig), " padded to (",
               x[2] + 2 * p.padding[0], " x ", x[3] + 2 * p.padding[1],
               ") is smaller than the dilated kernel (", p.dilation[0] * (w[2] - 1) + 1, " x ",
               p.dilation[1] * (w[3] - 1) + 1, ") of weight ", shape_str(w));
  return out;
}

// ---- pooling: output size of one spatial dim, PyTorch's pooling_output_shape.
int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                      bool ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  // the last window must start inside the input or the left padding
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Checks params and x (4-D shape), returns the 4-D output shape.
Shape pool_output_shape(std::string_view op, const Shape& x, const Shape& xs_orig,
                        const Pool2dParams& p, bool is_max) {
  const int64_t d0 = is_max ? p.dilation[0] : 1, d1 = is_max ? p.dilation[1] : 1;
  MINIDL_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "op `", op,
               "`: kernel size should be greater than zero, got kernel_size ", pair_str(p.kernel));
  MINIDL_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "op `", op,
               "`: stride should be greater than zero, got stride ", pair_str(p.stride));
  MINIDL_CHECK(d0 > 0 && d1 > 0, "op `", op, "`: dilation should be greater than zero, got ",
               "dilation ", pair_str(p.dilation));
  MINIDL_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, "op `", op,
               "`: negative padding is not supported, got padding ", pair_str(p.padding));
  MINIDL_CHECK(p.padding[0] <= p.kernel[0] / 2 && p.padding[1] <= p.kernel[1] / 2, "op `", op,
               "`: pad should be at most half of kernel size, got padding ", pair_str(p.padding),
               " and kernel_size ", pair_str(p.kernel));
  Shape out{x[0], x[1],
            pool_out_size(x[2], p.kernel[0], p.padding[0], p.stride[0], d0, p.ceil_mode),
            pool_out_size(x[3], p.kernel[1], p.padding[1], p.stride[1], d1, p.ceil_mode)};
  MINIDL_CHECK(out[2] > 0 && out[3] > 0, "op `", op, "`: given input of shape ", shape_str(xs_orig),
               ", calculated output size (", out[2], " x ", out[3], ") is too small (kernel_size ",
               pair_str(p.kernel), ", stride ", pair_str(p.stride), ", padding ",
               pair_str(p.padding), ", dilation (", d0, ", ", d1, "))");
  return out;
}

Tensor batched(const Tensor& t) {
  return t.dim() == 3 ? unsqueeze(t, 0) : t;
}
Tensor unbatch_like(const Tensor& t, size_t rank) {
  return rank == 3 ? squeeze(t, 0) : t;
}

// grad_out (and indices) must have the forward's output shape for x_shape.
void check_grad_shape(std::string_view op, const Tensor& grad_out, const Shape& out4,
                      const Shape& x_shape) {
  Shape expect = out4;
  if (x_shape.size() == 3) expect.erase(expect.begin());
  MINIDL_CHECK(grad_out.shape() == expect, "op `", op, "`: expected grad_out of shape ",
               shape_str(expect), " (the forward output for input ", shape_str(x_shape), "), got ",
               grad_out.shape_str());
}

// Values and (when `want_indices`) the int64 indices of the maxima.
std::pair<Tensor, Tensor> max_pool2d_run(const Tensor& x, const Pool2dParams& p,
                                         bool want_indices) {
  constexpr std::string_view op = "max_pool2d";
  check_floating(op, x, "input");
  Shape x4 = batched_shape(op, x.shape(), "input");
  Shape out4 = pool_output_shape(op, x4, x.shape(), p, true);
  Tensor xc = contiguous(batched(x));
  Tensor out = empty(out4, x.dtype(), x.device());
  Tensor idx = want_indices ? empty(out4, kInt64, x.device()) : Tensor();
  kernel<Op::max_pool2d>(x.device())(xc, out, idx, p);
  Tensor res = unbatch_like(out, x.shape().size()), res_idx;
  if (want_indices) res_idx = unbatch_like(idx, x.shape().size());
  return {res, res_idx};
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  constexpr std::string_view op = "conv2d";
  check_floating(op, x, "input");
  check_same(op, x, "input", w, "weight");
  Shape x4 = batched_shape(op, x.shape(), "input");
  Shape out4 = conv_output_shape(op, x4, x.shape(), w.shape(), p);
  Tensor b;
  if (bias.defined()) {
    check_same(op, x, "input", bias, "bias");
    MINIDL_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "op `", op, "`: given weight of ",
                 "shape ", w.shape_str(), ", expected bias to be 1-D with ", w.size(0),
                 " elements, got bias of shape ", bias.shape_str());
    b = contiguous(bias);
  }
  Tensor xc = contiguous(batched(x)), wc = contiguous(w);
  Tensor out = empty(out4, x.dtype(), x.device());
  kernel<Op::conv2d>(x.device())(xc, wc, b, out, p);
  return unbatch_like(out, x.shape().size());
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Shape& x_shape,
                             const Conv2dParams& p) {
  constexpr std::string_view op = "conv2d_backward_input";
  check_floating(op, grad_out, "grad_out");
  check_same(op, grad_out, "grad_out", w, "weight");
  Shape x4 = batched_shape(op, x_shape, "input");
  Shape out4 = conv_output_shape(op, x4, x_shape, w.shape(), p);
  check_grad_shape(op, grad_out, out4, x_shape);
  Tensor gc = contiguous(batched(grad_out)), wc = contiguous(w);
  Tensor grad_x = empty(x4, grad_out.dtype(), grad_out.device());
  kernel<Op::conv2d_backward_input>(grad_out.device())(gc, wc, grad_x, p);
  return unbatch_like(grad_x, x_shape.size());
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& w_shape,
                              const Conv2dParams& p) {
  constexpr std::string_view op = "conv2d_backward_weight";
  check_floating(op, grad_out, "grad_out");
  check_same(op, grad_out, "grad_out", x, "input");
  Shape x4 = batched_shape(op, x.shape(), "input");
  Shape out4 = conv_output_shape(op, x4, x.shape(), w_shape, p);
  check_grad_shape(op, grad_out, out4, x.shape());
  Tensor gc = contiguous(batched(grad_out)), xc = contiguous(batched(x));
  Tensor grad_w = empty(w_shape, grad_out.dtype(), grad_out.device());
  kernel<Op::conv2d_backward_weight>(grad_out.device())(gc, xc, grad_w, p);
  return grad_w;
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p) {
  return max_pool2d_run(x, p, true);
}

// On CPU the int64 indices are skipped (nothing needs them without a graph): at an MNIST
// evaluation batch of 1000 they are 74 MB, twice the pooled values.
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const bool need_indices = !x.defined() || !x.is_cpu();
  return max_pool2d_run(x, p, need_indices).first;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape,
                           const Pool2dParams& p) {
  constexpr std::string_view op = "max_pool2d_backward";
  check_floating(op, grad_out, "grad_out");
  MINIDL_CHECK(indices.defined(), "op `", op, "`: indices is an undefined tensor");
  MINIDL_CHECK(indices.dtype() == kInt64, "op `", op, "`: expected int64 indices, got dtype ",
               indices.dtype());
  MINIDL_CHECK(indices.device() == grad_out.device(), "op `", op, "`: grad_out is on ",
               grad_out.device(), " but indices is on ", indices.device());
  Shape x4 = batched_shape(op, x_shape, "input");
  Shape out4 = pool_output_shape(op, x4, x_shape, p, true);
  check_grad_shape(op, grad_out, out4, x_shape);
  MINIDL_CHECK(indices.shape() == grad_out.shape(), "op `", op, "`: indices of shape ",
               indices.shape_str(), " must have grad_out's shape ", grad_out.shape_str());
  Tensor gc = contiguous(batched(grad_out)), ic = contiguous(batched(indices));
  Tensor grad_x = empty(x4, grad_out.dtype(), grad_out.device());
  kernel<Op::max_pool2d_backward>(grad_out.device())(gc, ic, grad_x, p);
  return unbatch_like(grad_x, x_shape.size());
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  constexpr std::string_view op = "avg_pool2d";
  check_floating(op, x, "input");
  Shape x4 = batched_shape(op, x.shape(), "input");
  Shape out4 = pool_output_shape(op, x4, x.shape(), p, false);
  Tensor xc = contiguous(batched(x));
  Tensor out = empty(out4, x.dtype(), x.device());
  kernel<Op::avg_pool2d>(x.device())(xc, out, p);
  return unbatch_like(out, x.shape().size());
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p) {
  constexpr std::string_view op = "avg_pool2d_backward";
  check_floating(op, grad_out, "grad_out");
  Shape x4 = batched_shape(op, x_shape, "input");
  Shape out4 = pool_output_shape(op, x4, x_shape, p, false);
  check_grad_shape(op, grad_out, out4, x_shape);
  Tensor gc = contiguous(batched(grad_out));
  Tensor grad_x = empty(x4, grad_out.dtype(), grad_out.device());
  kernel<Op::avg_pool2d_backward>(grad_out.device())(gc, grad_x, p);
  return unbatch_like(grad_x, x_shape.size());
}

}  // namespace native

Pool2dParams pool2d_params(int64_t kernel, std::optional<int64_t> stride, int64_t padding) {
  Pool2dParams p;
  p.kernel[0] = p.kernel[1] = kernel;
  p.stride[0] = p.stride[1] = stride.value_or(kernel);
  p.padding[0] = p.padding[1] = padding;
  return p;
}

}  // namespace minidl
