// Raw reductions (sum/mean/var/std/amax/amin/max/min/argmax/argmin/logsumexp and sum_to_shape):
// dim normalisation and checks, result dtype, keepdim shapes, then dispatch; no history (the
// differentiable forms are autograd/functions/reduce.cpp).
#include <algorithm>

#include "tensor/ops.h"

namespace minidl::native {
namespace {

int64_t wrap(const Tensor& x, int64_t dim, std::string_view op) {
  const int64_t nd = x.dim();
  const int64_t lo = nd == 0 ? -1 : -nd, hi = nd == 0 ? 0 : nd - 1;
  MINIDL_CHECK(dim >= lo && dim <= hi, "op `", op,
               "`: dimension out of range (expected to be in range of [", lo, ", ", hi,
               "], but got ", dim, ") for input of shape ", x.shape_str());
  return dim < 0 ? dim + std::max<int64_t>(nd, 1) : dim;
}

// Normalised, sorted, unique dims (every dim when `dims` is empty; none for a 0-d tensor).
DimList reduce_dims(const Tensor& x, const DimList& dims, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
  const int64_t nd = x.dim();
  DimList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(size_t(std::max<int64_t>(nd, 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap(x, d, op);
    MINIDL_CHECK(!seen[size_t(w)], "op `", op, "`: dim ", w,
                 " appears multiple times in the list of dims ", shape_str(dims), " (input shape ",
                 x.shape_str(), ")");
    seen[size_t(w)] = true;
    if (nd > 0) out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape keep_shape(const Shape& s, const DimList& dims) {
  Shape k = s;
  for (int64_t d : dims) k[size_t(d)] = 1;
  return k;
}

Shape drop_shape(const Shape& s, const DimList& dims) {
  Shape r;
  for (size_t d = 0; d < s.size(); ++d)
    if (std::find(dims.begin(), dims.end(), int64_t(d)) == dims.end()) r.push_back(s[d]);
  return r;
}

Tensor finish(const Tensor& out, const Shape& in_shape, const DimList& dims, bool keepdim) {
  return keepdim ? out : native::view(out, drop_shape(in_shape, dims));
}

// Max-like reductions cannot reduce an empty dim (no identity).
void check_nonempty(const Tensor& x, const DimList& dims, bool all_dims, std::string_view op) {
  if (all_dims)
    MINIDL_CHECK(x.numel() > 0, "op `", op, "`: cannot compute ", op,
                 " over an empty tensor of shape ", x.shape_str(),
                 ": expected reduction dim to be specified for input.numel() == 0");
  for (int64_t d : dims)
    MINIDL_CHECK(x.size(d) != 0, "op `", op, "`: cannot compute ", op,
                 " over an empty dimension (expected reduction dim ", d,
                 " to have non-zero size; input shape ", x.shape_str(), ")");
}

template <Op op>
Tensor simple_reduce(const Tensor& x, const DimList& dims, bool keepdim, DType out_dtype) {
  Tensor out = empty(keep_shape(x.shape(), dims), out_dtype, x.device());
  kernel<op>(x.device())(x, out, dims);
  return finish(out, x.shape(), dims, keepdim);
}

std::pair<Tensor, Tensor> arg_reduce(const Tensor& x, int64_t dim, bool keepdim, bool is_max,
                                     std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
  const int64_t d = wrap(x, dim, op);
  const DimList dims = x.dim() == 0 ? DimList{} : DimList{d};
  check_nonempty(x, dims, false, op);
  const Shape ks = keep_shape(x.shape(), dims);
  Tensor values = empty(ks, x.dtype(), x.device());
  Tensor indices = empty(ks, kInt64, x.device());
  if (is_max)
    kernel<Op::max_dim>(x.device())(x, values, indices, d);
  else
    kernel<Op::min_dim>(x.device())(x, values, indices, d);
  return {finish(values, x.shape(), dims, keepdim), finish(indices, x.shape(), dims, keepdim)};
}

Tensor arg_index(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const std::string_view op = is_max ? "argmax" : "argmin";
  if (dim) return arg_reduce(x, *dim, keepdim, is_max, op).second;
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
  check_nonempty(x, {}, true, op);
  Tensor idx = arg_reduce(native::reshape(x, {-1}), 0, false, is_max, op).second;
  return keepdim ? native::view(idx, Shape(size_t(x.dim()), 1)) : idx;
}

void check_floating_var(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(is_floating(x.dtype()), "op `", op,
               "`: std and var only support floating point dtypes, got ", x.dtype(),
               " (input shape ", x.shape_str(), ")");
}

// amax/amin and the full max/min: the extreme over `dims`.
template <Op op>
Tensor extreme(const Tensor& x, const DimList& dims, bool keepdim, const char* name) {
  const DimList d = reduce_dims(x, dims, name);
  check_nonempty(x, d, dims.empty(), name);
  return simple_reduce<op>(x, d, keepdim, x.dtype());
}

}  // namespace

Tensor sum(const Tensor& x, const DimList& dims, bool keepdim, std::optional<DType> dtype) {
  const DimList d = reduce_dims(x, dims, "sum");
  const DType od = dtype ? *dtype : (is_integral(x.dtype(), true) ? kInt64 : x.dtype());
  const Tensor in = dtype ? native::to(x, *dtype) : x;
  return simple_reduce<Op::sum>(in, d, keepdim, od);
}

Tensor mean(const Tensor& x, const DimList& dims, bool keepdim) {
  const DimList d = reduce_dims(x, dims, "mean");
  MINIDL_CHECK(is_floating(x.dtype()),
               "op `mean`: could not infer output dtype. Input dtype must be either a floating "
               "point or complex dtype. Got: ",
               x.dtype(), " (input shape ", x.shape_str(), ")");
  return simple_reduce<Op::mean>(x, d, keepdim, x.dtype());
}

Tensor var(const Tensor& x, const DimList& dims, double correction, bool keepdim) {
  const DimList d = reduce_dims(x, dims, "var");
  check_floating_var(x, "var");
  Tensor out = empty(keep_shape(x.shape(), d), x.dtype(), x.device());
  kernel<Op::var>(x.device())(x, out, d, correction);
  return finish(out, x.shape(), d, keepdim);
}

Tensor std(const Tensor& x, const DimList& dims, double correction, bool keepdim) {
  reduce_dims(x, dims, "std");  // the checks, with "std" in their messages
  check_floating_var(x, "std");
  return native::sqrt(native::var(x, dims, correction, keepdim));
}

Tensor amax(const Tensor& x, const DimList& dims, bool keepdim) {
  return extreme<Op::amax>(x, dims, keepdim, "amax");
}
Tensor amin(const Tensor& x, const DimList& dims, bool keepdim) {
  return extreme<Op::amin>(x, dims, keepdim, "amin");
}
Tensor max(const Tensor& x) {
  return extreme<Op::amax>(x, {}, false, "max");
}
Tensor min(const Tensor& x) {
  return extreme<Op::amin>(x, {}, false, "min");
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce(x, dim, keepdim, true, "max");
}

std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce(x, dim, keepdim, false, "min");
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index(x, dim, keepdim, true);
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index(x, dim, keepdim, false);
}

Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim) {
  const DimList d = reduce_dims(x, dims, "logsumexp");
  const Tensor in = is_floating(x.dtype()) ? x : native::to(x, kFloat32);  // ints -> default float
  return simple_reduce<Op::logsumexp>(in, d, keepdim, in.dtype());
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  MINIDL_CHECK(x.defined(), "op `sum_to_shape`: undefined input tensor");
  if (x.shape() == shape) return x;
  const int64_t nd = x.dim(), lead = nd - int64_t(shape.size());
  MINIDL_CHECK(lead >= 0, "op `sum_to_shape`: cannot sum tensor of shape ", x.shape_str(),
               " to shape ", shape_str(shape), " of higher rank");
  DimList dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t xs = x.size(lead + int64_t(i));
    MINIDL_CHECK(shape[i] == xs || shape[i] == 1, "op `sum_to_shape`: shape ", shape_str(shape),
                 " is not broadcast-compatible with tensor shape ", x.shape_str(), " (dim ", i,
                 ": ", shape[i], " vs ", xs, ")");
    if (shape[i] == 1 && xs != 1) dims.push_back(lead + int64_t(i));
  }
  return dims.empty() ? native::reshape(x, shape)
                      : native::reshape(native::sum(x, dims, true, x.dtype()), shape);
}

}  // namespace minidl::native
