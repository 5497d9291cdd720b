// The differentiable masking ops: tril/triu run their raw op (tensor/ops/mask.cpp) and record
// the same mask applied to the gradient; masked_fill is a composite of where (whose autograd
// gives the gradient); masked_fill_ is the raw op after the in-place check.
#include <cmath>

#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {
namespace {

void check_defined(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
}

// A 0-d tensor holding `s` as dtype `dt`.
Tensor scalar_of(Scalar s, DType dt, Device device) {
  Tensor t = empty({}, dt, device);
  native::fill_(t, s);
  return t;
}

// The mask broadcast to x's shape (bool, same device, broadcastable without growing x).
Tensor expanded_mask(const Tensor& x, const Tensor& mask, std::string_view op) {
  check_defined(x, op);
  check_defined(mask, op);
  MINIDL_CHECK(mask.dtype() == kBool, "op `", op, "`: only supports boolean masks, but got mask ",
               "with dtype ", mask.dtype());
  check_same_device(op, x, mask);
  Shape shape = broadcast_shapes(x.shape(), mask.shape(), op);
  MINIDL_CHECK(shape == x.shape(), "op `", op, "`: mask of shape ", mask.shape_str(),
               " does not broadcast to the input's shape ", x.shape_str());
  return mask.expand(x.shape());
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  Tensor out = native::tril(x, diagonal);
  // the gradient is the same mask applied to the incoming gradient
  autograd::record("TrilBackward", {x}, {&out}, {}, [diagonal](const auto& g, const auto&) {
    return std::vector<Tensor>{tril(g[0], diagonal)};
  });
  return out;
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  Tensor out = native::triu(x, diagonal);
  autograd::record("TriuBackward", {x}, {&out}, {}, [diagonal](const auto& g, const auto&) {
    return std::vector<Tensor>{triu(g[0], diagonal)};
  });
  return out;
}

// Composite: where(mask, value, x) in x's dtype; where's autograd gives the gradient (grad with
// the filled positions zeroed; their sum to a tensor value). The checks are the raw op's.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined(x, "masked_fill");
  MINIDL_CHECK(
      !(value.is_floating() && is_integral(x.dtype(), true)) || std::isfinite(value.to_double()),
      "op `masked_fill`: value ", value, " cannot be converted to dtype ", x.dtype(),
      " without overflow");
  Tensor m = expanded_mask(x, mask, "masked_fill");
  return where(m, scalar_of(value, x.dtype(), x.device()), x);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  check_defined(value, "masked_fill");
  MINIDL_CHECK(value.dim() == 0, "op `masked_fill`: only supports a 0-dimensional value tensor, ",
               "but got tensor with ", value.dim(), " dimension(s) (shape ", value.shape_str(),
               ")");
  Tensor m = expanded_mask(x, mask, "masked_fill");
  return where(m, value.to(x.device()).to(x.dtype()), x);
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value) {
  autograd::check_inplace("masked_fill_", self);
  return native::masked_fill_(self, mask, value);
}

}  // namespace minidl
