// Tensor metadata and the raw views that share storage: view/reshape, permute/transpose, narrow,
// slice, select, expand, squeeze/unsqueeze, flatten/unflatten, as_strided, contiguous. No history
// here: the differentiable Tensor methods are autograd/functions/view.cpp.
#include <algorithm>
#include <numeric>
#include <optional>

#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace minidl {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << shape_str(s);
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
  if (base == nullptr && impl_->storage->nbytes() > 0)
    MINIDL_FAIL("tensor of shape ", shape_str(), " ", dtype_name(dtype()),
                ": its memory was released (a FullyShardedDataParallel parameter outside its "
                "unit's forward and backward; call the model through its FSDP wrapper, and a "
                "wrapped unit through operator(), not forward())");
  return base ? base + impl_->offset * int64_t(element_size()) : nullptr;
}

// The history-free primitive every view is built on (never records, also as a method).
Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  return native::as_strided(*this, shape, strides, offset);
}

Shape flatten_shape(const Shape& shape, int64_t start_dim, int64_t end_dim) {
  const int64_t nd = int64_t(shape.size());
  if (nd == 0) return {1};
  start_dim = wrap_dim(start_dim, nd, "flatten");
  end_dim = wrap_dim(end_dim, nd, "flatten");
  MINIDL_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim,
               " cannot come after end_dim ", end_dim);
  Shape s(shape.begin(), shape.begin() + start_dim);
  int64_t m = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) m *= shape[d];
  s.push_back(m);
  s.insert(s.end(), shape.begin() + end_dim + 1, shape.end());
  return s;
}

namespace native {
namespace {
// Infers one -1 dim and checks the element count.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
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
std::optional<Strides> view_strides(const Shape& oldshape, const Strides& oldstride,
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
}  // namespace

Tensor as_strided(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset) {
  MINIDL_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape_str(shape),
               " and strides ", shape_str(strides), " differ in length");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

Tensor view(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(shape, x.numel(), "view", x.shape());
  auto st = view_strides(x.shape(), x.strides(), s);
  MINIDL_CHECK(st.has_value(), "view: size ", shape_str(s), " is not compatible with input's size ",
               x.shape_str(), " and strides ", shape_str(x.strides()), "; use reshape() instead");
  return native::as_strided(x, s, *st, x.storage_offset());
}

Tensor reshape_view(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(shape, x.numel(), "reshape", x.shape());
  if (auto st = view_strides(x.shape(), x.strides(), s))
    return native::as_strided(x, s, *st, x.storage_offset());
  return Tensor();
}

// A view when the strides allow one (the result shares x's storage), else a contiguous copy.
Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor v = reshape_view(x, shape);
  if (v.defined()) return v;
  return native::view(native::contiguous(x), shape);
}

Tensor permute(const Tensor& x, const DimList& dims) {
  MINIDL_CHECK(int64_t(dims.size()) == x.dim(), "permute: number of dims ", dims.size(),
               " does not match tensor rank ", x.dim(), " (shape ", x.shape_str(), ")");
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    MINIDL_CHECK(!seen[d], "permute: repeated dim ", dims[i], " in ", shape_str(dims));
    seen[d] = true;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  return native::as_strided(x, s, st, x.storage_offset());
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  if (x.dim() == 0) return x;
  d0 = wrap_dim(d0, x.dim(), "transpose");
  d1 = wrap_dim(d1, x.dim(), "transpose");
  Shape s = x.shape();
  Strides st = x.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return native::as_strided(x, s, st, x.storage_offset());
}

Tensor t(const Tensor& x) {
  MINIDL_CHECK(x.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but got shape ",
               x.shape_str());
  return x.dim() < 2 ? x : native::transpose(x, 0, 1);
}

Tensor narrow(const Tensor& x, int64_t d, int64_t start, int64_t length) {
  MINIDL_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-d tensor");
  d = wrap_dim(d, x.dim(), "narrow");
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  MINIDL_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start,
               " + length ", length, " exceeds dimension ", d, " of size ", n, " (shape ",
               x.shape_str(), ")");
  Shape s = x.shape();
  s[d] = length;
  return native::as_strided(x, s, x.strides(), x.storage_offset() + start * x.strides()[d]);
}

Tensor slice(const Tensor& x, int64_t d, int64_t start, int64_t end, int64_t step) {
  MINIDL_CHECK(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  MINIDL_CHECK(step > 0, "slice: step must be positive, got ", step);
  d = wrap_dim(d, x.dim(), "slice");
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  Strides st = x.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return native::as_strided(x, s, st, x.storage_offset() + start * x.strides()[d]);
}

Tensor select(const Tensor& x, int64_t d, int64_t index) {
  MINIDL_CHECK(x.dim() > 0, "select: cannot select on a 0-d tensor");
  d = wrap_dim(d, x.dim(), "select");
  int64_t n = x.shape()[d];
  MINIDL_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dimension ", d,
               " with size ", n, " (shape ", x.shape_str(), ")");
  if (index < 0) index += n;
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t off = x.storage_offset() + index * st[d];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return native::as_strided(x, s, st, off);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  MINIDL_CHECK(int64_t(shape.size()) >= x.dim(), "expand: the number of sizes provided (",
               shape.size(), ") must be >= the number of dimensions in the tensor (", x.dim(),
               "); shape ", x.shape_str(), " to ", shape_str(shape));
  size_t lead = shape.size() - size_t(x.dim());
  Shape s(shape.size());
  Strides st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MINIDL_CHECK(shape[i] >= 0, "expand: -1 not allowed in leading new dims: ", shape_str(shape));
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t own = x.shape()[i - lead];
    int64_t want = shape[i] == -1 ? own : shape[i];
    if (own == want) {
      s[i] = own;
      st[i] = x.strides()[i - lead];
    } else {
      MINIDL_CHECK(own == 1, "expand: the expanded size of the tensor (", want,
                   ") must match the existing size (", own, ") at non-singleton dimension ", i,
                   ". Target sizes: ", shape_str(shape), ". Tensor sizes: ", x.shape_str());
      s[i] = want;
      st[i] = 0;
    }
  }
  return native::as_strided(x, s, st, x.storage_offset());
}

Tensor squeeze(const Tensor& x) {
  Shape s;
  Strides st;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[d] != 1) {
      s.push_back(x.shape()[d]);
      st.push_back(x.strides()[d]);
    }
  return native::as_strided(x, s, st, x.storage_offset());
}

// x itself when there is nothing to squeeze (0-d, or a dim whose size is not 1).
Tensor squeeze(const Tensor& x, int64_t d) {
  if (x.dim() == 0) return x;
  d = wrap_dim(d, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return native::as_strided(x, s, st, x.storage_offset());
}

Tensor unsqueeze(const Tensor& x, int64_t d) {
  d = wrap_dim(d, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t new_stride = d < x.dim() ? x.strides()[d] * x.shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return native::as_strided(x, s, st, x.storage_offset());
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return native::reshape(x, flatten_shape(x.shape(), start_dim, end_dim));
}

Tensor unflatten(const Tensor& x, int64_t d, const Shape& sizes) {
  d = wrap_dim(d, x.dim(), "unflatten");
  Shape inner = infer_shape(sizes, x.shape()[d], "unflatten", x.shape());
  Shape s(x.shape().begin(), x.shape().begin() + d);
  s.insert(s.end(), inner.begin(), inner.end());
  s.insert(s.end(), x.shape().begin() + d + 1, x.shape().end());
  return native::view(x, s);
}

// x itself when already contiguous.
Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return native::clone(x);
}

}  // namespace native
}  // namespace minidl
