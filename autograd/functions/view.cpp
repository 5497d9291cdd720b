// The differentiable view methods (Tensor::view, reshape, permute, ...): the raw view of
// tensor/ops/view.cpp, then a backward node when the input requires grad (as_strided stays the
// history-free primitive, in tensor/ops/view.cpp).
#include <utility>

#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {
namespace {
// The cheap check every view does first (views run on plain tensors all the time).
bool tracks(const Tensor& x) {
  return autograd::any_requires_grad({&x});
}
// Records a one-input view node; bw maps the output grad to the input grad.
template <class F>
void record_view(const char* name, const Tensor& x, Tensor& out, F bw) {
  autograd::record(name, {x}, {&out}, {},
                   [bw = std::move(bw)](const std::vector<Tensor>& g, const std::vector<Tensor>&) {
                     return std::vector<Tensor>{bw(g[0])};
                   });
}
// Grad of a view that picks a region: zeros of the input shape with g copied into the region.
template <class F>
Tensor region_grad(const Tensor& g, const Shape& in_shape, F region) {
  Tensor z = zeros(in_shape, g.dtype(), g.device());
  region(z).copy_(g);
  return z;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Tensor out = native::view(*this, shape);
  if (tracks(*this))
    record_view("ViewBackward", *this, out,
                [in = this->shape()](const Tensor& g) { return g.reshape(in); });
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (!tracks(*this)) return native::reshape(*this, shape);
  Tensor out = native::reshape_view(*this, shape);
  if (!out.defined()) return contiguous().view(shape);  // CloneBackward + ViewBackward
  record_view("ReshapeBackward", *this, out,
              [in = this->shape()](const Tensor& g) { return g.reshape(in); });
  return out;
}

Tensor Tensor::permute(const DimList& dims) const {
  Tensor out = native::permute(*this, dims);
  if (tracks(*this)) {
    DimList inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[size_t(wrap_dim(dims[i], dim()))] = int64_t(i);
    record_view("PermuteBackward", *this, out, [inv](const Tensor& g) { return g.permute(inv); });
  }
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  Tensor out = native::transpose(*this, d0, d1);
  if (out.is_same(*this)) return out;  // 0-d: itself, no history
  if (tracks(*this)) {
    d0 = wrap_dim(d0, dim());
    d1 = wrap_dim(d1, dim());
    record_view("TransposeBackward", *this, out,
                [d0, d1](const Tensor& g) { return g.transpose(d0, d1); });
  }
  return out;
}

Tensor Tensor::t() const {
  if (dim() != 2) return native::t(*this);  // itself (0/1-D), or the raw op's error
  return transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  Tensor out = native::narrow(*this, d, start, length);
  if (tracks(*this)) {
    d = wrap_dim(d, dim());
    if (start < 0) start += shape()[d];
    record_view("NarrowBackward", *this, out, [in = shape(), d, start, length](const Tensor& g) {
      return region_grad(g, in, [&](const Tensor& z) { return z.narrow(d, start, length); });
    });
  }
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  Tensor out = native::slice(*this, d, start, end, step);
  if (tracks(*this)) {
    // The arguments as given: z (the input's shape) normalises them as the forward did.
    record_view("SliceBackward", *this, out, [in = shape(), d, start, end, step](const Tensor& g) {
      return region_grad(g, in, [&](const Tensor& z) { return z.slice(d, start, end, step); });
    });
  }
  return out;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  Tensor out = native::select(*this, d, index);
  if (tracks(*this)) {
    d = wrap_dim(d, dim());
    if (index < 0) index += shape()[d];
    record_view("SelectBackward", *this, out, [in = shape(), d, index](const Tensor& g) {
      return region_grad(g, in, [&](const Tensor& z) { return z.select(d, index); });
    });
  }
  return out;
}

Tensor Tensor::expand(const Shape& shape) const {
  Tensor out = native::expand(*this, shape);
  if (tracks(*this))
    record_view("ExpandBackward", *this, out,
                [in = this->shape()](const Tensor& g) { return sum_to_shape(g, in); });
  return out;
}

Tensor Tensor::squeeze() const {
  Tensor out = native::squeeze(*this);
  if (tracks(*this))
    record_view("SqueezeBackward", *this, out,
                [in = shape()](const Tensor& g) { return g.reshape(in); });
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  Tensor out = native::squeeze(*this, d);
  if (out.is_same(*this)) return out;  // nothing squeezed: itself, no history
  if (tracks(*this)) {
    d = wrap_dim(d, dim());
    record_view("SqueezeBackward", *this, out, [d](const Tensor& g) { return g.unsqueeze(d); });
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  Tensor out = native::unsqueeze(*this, d);
  if (tracks(*this)) {
    d = wrap_dim(d, dim() + 1);
    record_view("UnsqueezeBackward", *this, out, [d](const Tensor& g) { return g.squeeze(d); });
  }
  return out;
}

// reshape's history (a view: ReshapeBackward; a copy: CloneBackward + ViewBackward).
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return reshape(flatten_shape(shape(), start_dim, end_dim));
}

// view's history.
Tensor Tensor::unflatten(int64_t d, const Shape& sizes) const {
  Tensor out = native::unflatten(*this, d, sizes);
  if (tracks(*this))
    record_view("ViewBackward", *this, out,
                [in = shape()](const Tensor& g) { return g.reshape(in); });
  return out;
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  return minidl::split(*this, split_size, d);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  return minidl::chunk(*this, chunks, d);
}

}  // namespace minidl
