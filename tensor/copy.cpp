// Copies and conversions: copy_ (broadcast, cast, cross-device), contiguous, clone, to(),
// fill_, and element access (item, at, tolist). clone/to record their backward; copy_ and fill_
// refuse to write into tensors that take part in autograd while grad mode is on.
#include <cstring>

#include "autograd/function.h"
#include "tensor/ops.h"

namespace minidl {

Tensor& Tensor::copy_(const Tensor& src_in) {
  MINIDL_CHECK(defined() && src_in.defined(), "copy_: undefined tensor");
  autograd::check_inplace("copy_", *this, src_in);
  Tensor src = src_in;
  if (src.shape() != shape()) {
    broadcast_shapes(shape(), src.shape(), "copy_");  // validates with a named error
    src = src.expand(shape());
  }
  if (numel() == 0) return *this;
  if (src.shares_storage(*this) && !(src.storage_offset() == storage_offset() &&
                                     src.strides() == strides() && src.dtype() == dtype())) {
    src = src.clone();  // overlapping views: read from a private copy
  }
  if (src.device() == device()) {
    kernel<Op::copy>(device())(src, *this);
  } else {
    CrossDeviceCopyFn xfer = cross_device_copy();
    MINIDL_CHECK(xfer, "copy_: cannot copy from ", src.device(), " to ", device(),
                 ": this build has no CUDA backend");
    Tensor s = src.dtype() == dtype() ? src.contiguous() : src.to(dtype()).contiguous();
    if (is_contiguous()) {
      xfer(s, *this);
    } else {
      Tensor tmp = empty(shape(), dtype(), device());
      xfer(s, tmp);
      kernel<Op::copy>(device())(tmp, *this);
    }
  }
  storage()->bump_version();
  return *this;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  if (numel() > 0) kernel<Op::copy>(device())(*this, out);
  if (autograd::any_requires_grad({this}))
    autograd::record("CloneBackward", {*this}, {&out}, {},
                     [](const auto& g, const auto&) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt, device());
  if (numel() > 0) kernel<Op::copy>(device())(*this, out);
  // integer/bool results never get history
  if (is_floating(dt) && autograd::any_requires_grad({this}))
    autograd::record(
        "ToCopyBackward", {*this}, {&out}, {},
        [src = dtype()](const auto& g, const auto&) { return std::vector<Tensor>{g[0].to(src)}; });
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor out = empty(shape(), dtype(), dev);
  {
    NoGradGuard guard;
    out.copy_(*this);
  }
  if (autograd::any_requires_grad({this}))
    autograd::record(
        "ToCopyBackward", {*this}, {&out}, {},
        [src = device()](const auto& g, const auto&) { return std::vector<Tensor>{g[0].to(src)}; });
  return out;
}

Tensor Tensor::to(Device dev, DType dt) const {
  return to(dt).to(dev);
}

Tensor& Tensor::fill_(Scalar value) {
  autograd::check_inplace("fill_", *this);
  if (numel() > 0) kernel<Op::fill>(device())(*this, value);
  storage()->bump_version();
  return *this;
}

Scalar Tensor::item() const {
  MINIDL_CHECK(defined(), "item(): undefined tensor");
  MINIDL_CHECK(numel() == 1, "item(): a Tensor with ", numel(),
               " elements cannot be converted to Scalar (shape ", shape_str(), ")");
  Tensor c = is_cpu() ? *this : to(kCPU);
  return dispatch_all(dtype(), "item", [&]<typename T>() -> Scalar {
    return Scalar(*static_cast<const T*>(c.data_ptr()));
  });
}

double Tensor::at(const std::vector<int64_t>& index) const {
  MINIDL_CHECK(int64_t(index.size()) == dim(), "at(): got ", index.size(),
               " indices for a tensor of shape ", shape_str());
  NoGradGuard guard;  // element access records nothing
  Tensor t = *this;
  for (int64_t i : index) t = t.select(0, i);
  return t.item().to_double();
}

template <typename T>
std::vector<T> Tensor::tolist() const {
  NoGradGuard guard;
  Tensor c = to(kCPU).to(dtype_of<T>()).contiguous();
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::tolist<float>() const;
template std::vector<double> Tensor::tolist<double>() const;
template std::vector<int64_t> Tensor::tolist<int64_t>() const;
template std::vector<int32_t> Tensor::tolist<int32_t>() const;
template std::vector<uint8_t> Tensor::tolist<uint8_t>() const;
template std::vector<bool> Tensor::tolist<bool>() const;

}  // namespace minidl
