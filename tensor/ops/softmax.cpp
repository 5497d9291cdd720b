// Raw softmax ops (torch.softmax / log_softmax and their backward formulas): dim and dtype
// checks, output allocation, dispatch; no history (autograd/functions/softmax.cpp records).
// 0-d inputs are treated as one-element vectors.
#include <algorithm>

#include "tensor/ops.h"

namespace minidl::native {
namespace {

int64_t softmax_dim(const Tensor& x, int64_t dim, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
  const int64_t nd = x.dim();
  const int64_t lo = nd == 0 ? -1 : -nd, hi = nd == 0 ? 0 : nd - 1;
  MINIDL_CHECK(dim >= lo && dim <= hi, "op `", op,
               "`: dimension out of range (expected to be in range of [", lo, ", ", hi,
               "], but got ", dim, ") for input of shape ", x.shape_str());
  MINIDL_CHECK(is_floating(x.dtype()), "op `", op, "` needs a floating dtype, got ", x.dtype(),
               " (input shape ", x.shape_str(), ")");
  return dim < 0 ? dim + std::max<int64_t>(nd, 1) : dim;
}

template <Op op>
Tensor softmax_forward(const Tensor& x, int64_t dim, std::string_view name) {
  const int64_t d = softmax_dim(x, dim, name);
  const Tensor in = x.dim() == 0 ? native::reshape(x, {1}) : x;
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  if (out.numel() > 0) kernel<op>(in.device())(in, out, d);
  return x.dim() == 0 ? native::reshape(out, {}) : out;
}

template <Op op>
Tensor softmax_bwd(const Tensor& grad_out, const Tensor& out, int64_t dim, std::string_view name) {
  MINIDL_CHECK(grad_out.defined() && out.defined(), "op `", name, "`: undefined input tensor");
  const int64_t d = softmax_dim(out, dim, name);
  MINIDL_CHECK(grad_out.shape() == out.shape(), "op `", name, "`: grad_output shape ",
               grad_out.shape_str(), " does not match output shape ", out.shape_str());
  MINIDL_CHECK(grad_out.device() == out.device(), "op `", name,
               "`: expected grad_output and output on the same device, got ", grad_out.device(),
               " and ", out.device());
  MINIDL_CHECK(grad_out.dtype() == out.dtype(), "op `", name, "`: grad_output dtype ",
               grad_out.dtype(), " does not match output dtype ", out.dtype());
  const bool scalar = out.dim() == 0;
  const Tensor g = scalar ? native::reshape(grad_out, {1}) : grad_out;
  const Tensor y = scalar ? native::reshape(out, {1}) : out;
  Tensor grad_in = empty(y.shape(), y.dtype(), y.device());
  if (grad_in.numel() > 0) kernel<op>(y.device())(g, y, grad_in, d);
  return scalar ? native::reshape(grad_in, {}) : grad_in;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_forward<Op::softmax>(x, dim, "softmax");
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_forward<Op::log_softmax>(x, dim, "log_softmax");
}

Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  return softmax_bwd<Op::softmax_backward>(grad_out, out, dim, "softmax_backward");
}

Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  return softmax_bwd<Op::log_softmax_backward>(grad_out, out, dim, "log_softmax_backward");
}

}  // namespace minidl::native
