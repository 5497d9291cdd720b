// The differentiable scans: cumsum runs its raw op (tensor/ops/scan.cpp) on the differentiable
// cast of its input and records the reverse running sum of the gradient as its backward.
#include <algorithm>

#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  Tensor out = native::cumsum(x, dim, dtype);  // checks x, dtype and dim
  if (!autograd::any_requires_grad({&x})) return out;
  // history hangs off the differentiable cast of x to the result dtype (x itself when equal)
  Tensor in = x.to(out.dtype());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumsum");
  autograd::record("CumsumBackward", {in}, {&out}, {}, [d](const auto& g, const auto&) {
    return std::vector<Tensor>{native::cumsum_backward(g[0], d)};
  });
  return out;
}

}  // namespace minidl
