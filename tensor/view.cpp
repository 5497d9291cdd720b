// Tensor metadata and views that share storage: view/reshape, permute/transpose, narrow,
// slice, select, expand, squeeze/unsqueeze, flatten, as_strided, split/chunk. Views record a
// backward node when their input requires grad (as_strided stays the raw, history-free primitive).
#include <algorithm>
#include <numeric>

#include "autograd/function.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

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

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t acc = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  MINIDL_CHECK(dim >= lo && dim <= hi, op.empty() ? "" : "op `", op,
               op.empty() ? "" : "`: ", "dimension out of range (expected to be in range of [", lo,
               ", ", hi, "], but got ", dim, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    MINIDL_CHECK(d >= 0, "empty: negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * itemsize(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  return strides()[wrap_dim(d, dim(), "stride")];
}
int64_t Tensor::numel() const {
  return shape_numel(shape());
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // like PyTorch: empty tensors are contiguous
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  char* base = static_cast<char*>(impl_->storage->data());
  return base ? base + impl_->offset * int64_t(element_size()) : nullptr;
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  MINIDL_CHECK(shape.size() == strides.size(), "as_strided: shape ", minidl::shape_str(shape),
               " and strides ", minidl::shape_str(strides), " differ in length");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

// Infers one -1 dim and checks the element count.
static Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MINIDL_CHECK(infer < 0, op, ": only one dimension can be inferred in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      MINIDL_CHECK(out[i] >= 0, op, ": invalid shape dimension ", out[i], " in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MINIDL_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
                 " is invalid for input of size ", numel, " (shape ", shape_str(from), ")");
    out[infer] = numel / known;
  } else {
    MINIDL_CHECK(known == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ",
                 numel, " (shape ", shape_str(from), ")");
  }
  return out;
}

// Strides for viewing (old shape, old strides) as new_shape without a copy, or empty when
// impossible (PyTorch's computeStride).
static std::optional<Strides> view_strides(const Shape& oldshape, const Strides& oldstride,
                                           const Shape& newshape) {
  Strides newstride(newshape.size());
  if (shape_numel(oldshape) == 0) return contiguous_strides(newshape);
  if (oldshape.empty()) return Strides(newshape.size(), 1);  // 0-d: any all-ones shape
  int64_t view_d = int64_t(newshape.size()) - 1;
  int64_t chunk_base_stride = oldstride.empty() ? 1 : oldstride.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = int64_t(oldshape.size()) - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= oldshape[tensor_d];
    if (tensor_d == 0 || (oldshape[tensor_d - 1] != 1 &&
                          oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
        newstride[view_d] = view_numel * chunk_base_stride;
        view_numel *= newshape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "view", this->shape());
  auto st = view_strides(this->shape(), strides(), s);
  MINIDL_CHECK(st.has_value(), "view: size ", minidl::shape_str(s),
               " is not compatible with input's size ", shape_str(), " and strides ",
               minidl::shape_str(strides()), "; use reshape() instead");
  Tensor out = as_strided(s, *st, storage_offset());
  if (tracks(*this))
    record_view("ViewBackward", *this, out,
                [in = this->shape()](const Tensor& g) { return g.reshape(in); });
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "reshape", this->shape());
  if (auto st = view_strides(this->shape(), strides(), s)) {
    Tensor out = as_strided(s, *st, storage_offset());
    if (tracks(*this))
      record_view("ReshapeBackward", *this, out,
                  [in = this->shape()](const Tensor& g) { return g.reshape(in); });
    return out;
  }
  return contiguous().view(s);  // CloneBackward + ViewBackward record themselves
}

Tensor Tensor::permute(const DimList& dims) const {
  MINIDL_CHECK(int64_t(dims.size()) == dim(), "permute: number of dims ", dims.size(),
               " does not match tensor rank ", dim(), " (shape ", shape_str(), ")");
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    MINIDL_CHECK(!seen[d], "permute: repeated dim ", dims[i], " in ", minidl::shape_str(dims));
    seen[d] = true;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = as_strided(s, st, storage_offset());
  if (tracks(*this)) {
    DimList inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[size_t(wrap_dim(dims[i], dim()))] = int64_t(i);
    record_view("PermuteBackward", *this, out, [inv](const Tensor& g) { return g.permute(inv); });
  }
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape s = shape();
  Strides st = strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = as_strided(s, st, storage_offset());
  if (tracks(*this))
    record_view("TransposeBackward", *this, out,
                [d0, d1](const Tensor& g) { return g.transpose(d0, d1); });
  return out;
}

Tensor Tensor::t() const {
  MINIDL_CHECK(dim() <= 2, "t() expects a tensor with <= 2 dimensions, but got shape ",
               shape_str());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  MINIDL_CHECK(dim() > 0, "narrow: cannot narrow a 0-d tensor");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  MINIDL_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start,
               " + length ", length, " exceeds dimension ", d, " of size ", n, " (shape ",
               shape_str(), ")");
  Shape s = shape();
  s[d] = length;
  Tensor out = as_strided(s, strides(), storage_offset() + start * strides()[d]);
  if (tracks(*this))
    record_view("NarrowBackward", *this, out, [in = shape(), d, start, length](const Tensor& g) {
      return region_grad(g, in, [&](const Tensor& z) { return z.narrow(d, start, length); });
    });
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  MINIDL_CHECK(dim() > 0, "slice: cannot slice a 0-d tensor");
  MINIDL_CHECK(step > 0, "slice: step must be positive, got ", step);
  d = wrap_dim(d, dim(), "slice");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape();
  Strides st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = as_strided(s, st, storage_offset() + start * strides()[d]);
  if (tracks(*this))
    record_view("SliceBackward", *this, out, [in = shape(), d, start, end, step](const Tensor& g) {
      return region_grad(g, in, [&](const Tensor& z) { return z.slice(d, start, end, step); });
    });
  return out;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  MINIDL_CHECK(dim() > 0, "select: cannot select on a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = shape()[d];
  MINIDL_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dimension ", d,
               " with size ", n, " (shape ", shape_str(), ")");
  if (index < 0) index += n;
  Shape s = shape();
  Strides st = strides();
  int64_t off = storage_offset() + index * st[d];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = as_strided(s, st, off);
  if (tracks(*this))
    record_view("SelectBackward", *this, out, [in = shape(), d, index](const Tensor& g) {
      return region_grad(g, in, [&](const Tensor& z) { return z.select(d, index); });
    });
  return out;
}

Tensor Tensor::expand(const Shape& shape) const {
  MINIDL_CHECK(int64_t(shape.size()) >= dim(), "expand: the number of sizes provided (",
               shape.size(), ") must be >= the number of dimensions in the tensor (", dim(),
               "); shape ", shape_str(), " to ", minidl::shape_str(shape));
  size_t lead = shape.size() - size_t(dim());
  Shape s(shape.size());
  Strides st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MINIDL_CHECK(shape[i] >= 0,
                   "expand: -1 not allowed in leading new dims: ", minidl::shape_str(shape));
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t own = this->shape()[i - lead];
    int64_t want = shape[i] == -1 ? own : shape[i];
    if (own == want) {
      s[i] = own;
      st[i] = strides()[i - lead];
    } else {
      MINIDL_CHECK(own == 1, "expand: the expanded size of the tensor (", want,
                   ") must match the existing size (", own, ") at non-singleton dimension ", i,
                   ". Target sizes: ", minidl::shape_str(shape), ". Tensor sizes: ", shape_str());
      s[i] = want;
      st[i] = 0;
    }
  }
  Tensor out = as_strided(s, st, storage_offset());
  if (tracks(*this))
    record_view("ExpandBackward", *this, out,
                [in = this->shape()](const Tensor& g) { return sum_to_shape(g, in); });
  return out;
}

Tensor Tensor::squeeze() const {
  Shape s;
  Strides st;
  for (int64_t d = 0; d < dim(); ++d)
    if (shape()[d] != 1) {
      s.push_back(shape()[d]);
      st.push_back(strides()[d]);
    }
  Tensor out = as_strided(s, st, storage_offset());
  if (tracks(*this))
    record_view("SqueezeBackward", *this, out,
                [in = shape()](const Tensor& g) { return g.reshape(in); });
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape s = shape();
  Strides st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = as_strided(s, st, storage_offset());
  if (tracks(*this))
    record_view("SqueezeBackward", *this, out, [d](const Tensor& g) { return g.unsqueeze(d); });
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape();
  Strides st = strides();
  int64_t new_stride = d < dim() ? strides()[d] * shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  Tensor out = as_strided(s, st, storage_offset());
  if (tracks(*this))
    record_view("UnsqueezeBackward", *this, out, [d](const Tensor& g) { return g.squeeze(d); });
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  MINIDL_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim,
               " cannot come after end_dim ", end_dim);
  Shape s(shape().begin(), shape().begin() + start_dim);
  int64_t m = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) m *= shape()[d];
  s.push_back(m);
  s.insert(s.end(), shape().begin() + end_dim + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::unflatten(int64_t d, const Shape& sizes) const {
  d = wrap_dim(d, dim(), "unflatten");
  Shape inner = infer_shape(sizes, shape()[d], "unflatten", shape());
  Shape s(shape().begin(), shape().begin() + d);
  s.insert(s.end(), inner.begin(), inner.end());
  s.insert(s.end(), shape().begin() + d + 1, shape().end());
  return view(s);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  return minidl::split(*this, split_size, d);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  return minidl::chunk(*this, chunks, d);
}

}  // namespace minidl
