// Raw copies and conversions: copy_ (broadcast, cast, cross-device), clone, to(), fill_, and
// the history-free element access methods (item, at, tolist). The differentiable copy methods
// (clone/to record their backward; copy_/fill_ check autograd) are autograd/functions/copy.cpp.
#include <cstring>

#include "tensor/ops.h"
#include "tensor/profiler.h"

namespace minidl {
namespace native {

// self is a handle: `dst` shares its TensorImpl, so the kernels write into self's elements.
const Tensor& copy_(const Tensor& self, const Tensor& src_in) {
  MINIDL_CHECK(self.defined() && src_in.defined(), "copy_: undefined tensor");
  Tensor dst = self;
  Tensor src = src_in;
  if (src.shape() != self.shape()) {
    broadcast_shapes(self.shape(), src.shape(), "copy_");  // validates with a named error
    src = native::expand(src, self.shape());
  }
  if (self.numel() == 0) return self;
  if (src.shares_storage(self) &&
      !(src.storage_offset() == self.storage_offset() && src.strides() == self.strides() &&
        src.dtype() == self.dtype())) {
    src = native::clone(src);  // overlapping views: read from a private copy
  }
  if (src.device() == self.device()) {
    kernel<Op::copy>(self.device())(src, dst);
  } else {
    CrossDeviceCopyFn xfer = cross_device_copy();
    MINIDL_CHECK(xfer, "copy_: cannot copy from ", src.device(), " to ", self.device(),
                 ": this build has no CUDA backend");
    Tensor s = src.dtype() == self.dtype() ? native::contiguous(src)
                                           : native::contiguous(native::to(src, self.dtype()));
    if (self.is_contiguous()) {
      xfer(s, dst);
    } else {
      Tensor tmp = empty(self.shape(), self.dtype(), self.device());
      xfer(s, tmp);
      kernel<Op::copy>(self.device())(tmp, dst);
    }
  }
  self.storage()->bump_version();
  return self;
}

Tensor clone(const Tensor& x) {
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0) kernel<Op::copy>(x.device())(x, out);
  return out;
}

// x itself when the dtype already matches.
Tensor to(const Tensor& x, DType dt) {
  if (dt == x.dtype()) return x;
  Tensor out = empty(x.shape(), dt, x.device());
  if (x.numel() > 0) kernel<Op::copy>(x.device())(x, out);
  return out;
}

// x itself when already on `dev`.
Tensor to(const Tensor& x, Device dev) {
  if (dev == x.device()) return x;
  Tensor out = empty(x.shape(), x.dtype(), dev);
  native::copy_(out, x);
  return out;
}

Tensor to(const Tensor& x, Device dev, DType dt) {
  return native::to(native::to(x, dt), dev);
}

const Tensor& fill_(const Tensor& self, Scalar value) {
  Tensor dst = self;  // a handle sharing self's TensorImpl
  if (self.numel() > 0) kernel<Op::fill>(self.device())(dst, value);
  self.storage()->bump_version();
  return self;
}

void foreach_copy_(const std::vector<Tensor>& dst, const std::vector<Tensor>& src) {
  MINIDL_CHECK(dst.size() == src.size(), "op `foreach_copy_`: ", dst.size(), " destinations for ",
               src.size(), " sources");
  if (dst.empty()) return;
  const Device dev = dst[0].device();
  for (size_t i = 0; i < dst.size(); ++i) {
    const Tensor &d = dst[i], &s = src[i];
    MINIDL_CHECK(
        d.defined() && s.defined() && d.is_floating_point() && s.is_floating_point() &&
            d.device() == dev && s.device() == dev && d.is_contiguous() && s.is_contiguous() &&
            d.shape() == s.shape(),
        "op `foreach_copy_`: pair ", i, " must be contiguous floating tensors of one shape on ",
        dev, ", got dst ", d.defined() ? d.shape_str() : "undefined", " ",
        d.defined() ? dtype_name(d.dtype()) : "", " on ", d.defined() ? d.device().str() : "-",
        " and src ", s.defined() ? s.shape_str() : "undefined", " ",
        s.defined() ? dtype_name(s.dtype()) : "", " on ", s.defined() ? s.device().str() : "-");
  }
  kernel<Op::foreach_copy>(dev)(dst, src);
  for (const Tensor& d : dst) d.storage()->bump_version();
}

}  // namespace native

// ---- element access: records nothing (raw forms only)
Scalar Tensor::item() const {
  MINIDL_CHECK(defined(), "item(): undefined tensor");
  MINIDL_CHECK(numel() == 1, "item(): a Tensor with ", numel(),
               " elements cannot be converted to Scalar (shape ", shape_str(), ")");
  profiler::detail::count_host_read();
  Tensor c = is_cpu() ? *this : native::to(*this, kCPU);
  return dispatch_all(dtype(), "item", [&]<typename T>() -> Scalar {
    return Scalar(*static_cast<const T*>(c.data_ptr()));
  });
}

double Tensor::at(const std::vector<int64_t>& index) const {
  MINIDL_CHECK(int64_t(index.size()) == dim(), "at(): got ", index.size(),
               " indices for a tensor of shape ", shape_str());
  Tensor t = *this;
  for (int64_t i : index) t = native::select(t, 0, i);
  return t.item().to_double();
}

template <typename T>
std::vector<T> Tensor::tolist() const {
  profiler::detail::count_host_read();
  Tensor c = native::contiguous(native::to(native::to(*this, kCPU), dtype_of<T>()));
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
