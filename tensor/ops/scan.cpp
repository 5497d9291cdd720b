// Scans, raw layer: cumsum and its backward (the reverse running sum). Kernels in
// tensor/cpu/scan_select.cpp, tensor/cuda/scan_select.cu; no history here.
#include <algorithm>

#include "tensor/ops.h"

namespace minidl::native {
namespace {

// out = in's running sum along `dim` (suffix sums when reverse). in:[..] any dtype the kernel
// supports, dim normalised, rank >= 1.
Tensor scan(const Tensor& in, int64_t dim, bool reverse) {
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  if (out.numel() > 0) kernel<Op::cumsum>(in.device())(in, out, dim, reverse);
  return out;
}

}  // namespace

// Integer and bool inputs accumulate in int64 (torch).
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  MINIDL_CHECK(x.defined(), "op `cumsum`: undefined input tensor");
  const DType dt = dtype.value_or(is_integral(x.dtype(), true) ? kInt64 : x.dtype());
  MINIDL_CHECK(dt != kBool, "op `cumsum`: dtype bool is not supported");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumsum");
  Tensor in = to(x, dt);
  return x.dim() == 0 ? reshape(scan(reshape(in, {1}), 0, false), {}) : scan(in, d, false);
}

// The gradient of cumsum along dim: the reverse running sum of grad_out (0-d: itself).
Tensor cumsum_backward(const Tensor& grad_out, int64_t dim) {
  if (grad_out.dim() == 0) return grad_out;
  return scan(grad_out, wrap_dim(dim, grad_out.dim(), "cumsum_backward"), true);
}

}  // namespace minidl::native
