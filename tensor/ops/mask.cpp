// Masking, raw layer: tril/triu (kernels in tensor/cpu/scan_select.cpp,
// tensor/cuda/scan_select.cu) and masked_fill(_) (composite: where). No history here.
#include <cmath>

#include "tensor/ops.h"

namespace minidl::native {
namespace {

void check_defined(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
}

template <Op op>
Tensor tri(const Tensor& x, int64_t diagonal, const char* name) {
  check_defined(x, name);
  MINIDL_CHECK(x.dim() >= 2, "op `", name, "`: input tensor must have at least 2 dimensions, got ",
               "shape ", x.shape_str());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) kernel<op>(x.device())(x, out, diagonal);
  return out;
}

// A 0-d tensor holding `s` as dtype `dt`.
Tensor scalar_of(Scalar s, DType dt, Device device) {
  Tensor t = empty({}, dt, device);
  fill_(t, s);
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
  return expand(mask, x.shape());
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return tri<Op::tril>(x, diagonal, "tril");
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  return tri<Op::triu>(x, diagonal, "triu");
}

// torch's masked_fill is where(mask, value, x) in x's dtype; a kernel of its own would add
// nothing (the where kernel already broadcasts).
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
  return where(m, to(to(value, x.device()), x.dtype()), x);
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value) {
  Tensor m = expanded_mask(self, mask, "masked_fill_");
  if (self.numel() > 0) {
    Tensor v = expand(scalar_of(value, self.dtype(), self.device()), self.shape());
    kernel<Op::where>(self.device())(m, v, self, self);  // elementwise: out may alias b
  }
  self.storage()->bump_version();
  return self;
}

}  // namespace minidl::native
