// The differentiable copy methods: clone/to record their backward (CloneBackward,
// ToCopyBackward); copy_ and fill_ refuse to write into tensors that take part in autograd
// while grad mode is on (check_inplace), then run the raw op of tensor/ops/copy.cpp.
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {

Tensor& Tensor::copy_(const Tensor& src) {
  MINIDL_CHECK(defined() && src.defined(), "copy_: undefined tensor");
  autograd::check_inplace("copy_", *this, src);
  native::copy_(*this, src);
  return *this;
}

Tensor& Tensor::fill_(Scalar value) {
  autograd::check_inplace("fill_", *this);
  native::fill_(*this, value);
  return *this;
}

// Itself when already contiguous, else clone()'s history.
Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = native::clone(*this);
  if (autograd::any_requires_grad({this}))
    autograd::record("CloneBackward", {*this}, {&out}, {},
                     [](const auto& g, const auto&) { return std::vector<Tensor>{g[0]}; });
  return out;
}

// Itself when the dtype already matches; integer/bool results never get history.
Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = native::to(*this, dt);
  if (is_floating(dt) && autograd::any_requires_grad({this}))
    autograd::record(
        "ToCopyBackward", {*this}, {&out}, {},
        [src = dtype()](const auto& g, const auto&) { return std::vector<Tensor>{g[0].to(src)}; });
  return out;
}

// Itself when already on `dev`.
Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor out = native::to(*this, dev);
  if (autograd::any_requires_grad({this}))
    autograd::record(
        "ToCopyBackward", {*this}, {&out}, {},
        [src = device()](const auto& g, const auto&) { return std::vector<Tensor>{g[0].to(src)}; });
  return out;
}

Tensor Tensor::to(Device dev, DType dt) const {
  return to(dt).to(dev);
}

}  // namespace minidl
