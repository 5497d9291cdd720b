// Reduction frontends (torch.sum/mean/var/std/amax/amin/max/min/argmax/argmin/logsumexp and
// sum_to_shape): dim normalisation and checks, result dtype, keepdim shapes, then dispatch;
// floating results record their backward (autograd::record) when an input requires grad.
#include <algorithm>

#include "autograd/function.h"
#include "tensor/autocast.h"
#include "tensor/ops.h"

namespace minidl {
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
  return keepdim ? out : out.view(drop_shape(in_shape, dims));
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
  Tensor idx = arg_reduce(x.reshape({-1}), 0, false, is_max, op).second;
  return keepdim ? idx.view(Shape(size_t(x.dim()), 1)) : idx;
}

// ---- autograd helpers (backward closures run under NoGradGuard inside the engine)
using autograd::record;
using Grads = std::vector<Tensor>;

// g: gradient of a reduction's output -> broadcast view of in_shape (re-inserts reduced dims).
Tensor unreduce(const Tensor& g, const Shape& in_shape, const DimList& dims, bool keepdim) {
  Tensor r = g;
  if (!keepdim)
    for (int64_t d : dims) r = r.unsqueeze(d);  // dims sorted ascending
  return r.expand(in_shape);
}

int64_t reduced_count(const Shape& s, const DimList& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s[size_t(d)];
  return n;
}

// amax/amin/max/min: the gradient is split evenly among the elements equal to the result.
// `nan_ties` (the full max()/min(), PyTorch's evenly_distribute_backward): a NaN result is
// shared by the NaN elements. amax/amin (PyTorch's scale_grad_by_count) leave a NaN result with
// no equal element, so its gradient is 0/0 = NaN, as in PyTorch 1.13.
void record_extreme(const char* name, const Tensor& x, Tensor& out, const DimList& d, bool keepdim,
                    bool nan_ties) {
  if (!is_floating(out.dtype())) return;
  record(name, {x}, {&out}, {x, out}, [d, keepdim, nan_ties](const Grads& g, const Grads& s) {
    const Tensor& x = s[0];
    const Tensor r = unreduce(s[1], x.shape(), d, keepdim);
    Tensor tie = eq(x, r);
    if (nan_ties) tie = logical_or(tie, logical_and(ne(x, x), ne(r, r)));
    Tensor mask = tie.to(g[0].dtype());
    Tensor count = sum(mask, d, true);
    return Grads{div(mul(unreduce(g[0], x.shape(), d, keepdim), mask), count)};
  });
}

// max/min(dim): the values' gradient goes to the index positions.
void record_dim_extreme(const char* name, const Tensor& x, std::pair<Tensor, Tensor>& r,
                        int64_t dim, bool keepdim) {
  if (!is_floating(r.first.dtype())) return;
  const int64_t d = dim < 0 ? dim + std::max<int64_t>(x.dim(), 1) : dim;
  record(name, {x}, {&r.first}, {r.second},
         [shape = x.shape(), d, keepdim](const Grads& g, const Grads& s) {
           if (shape.empty()) return Grads{g[0].reshape({})};
           const Tensor idx = keepdim ? s[0] : s[0].unsqueeze(d);
           const Tensor gk = keepdim ? g[0] : g[0].unsqueeze(d);
           return Grads{scatter_add(zeros(shape, g[0].dtype(), g[0].device()), d, idx, gk)};
         });
}

void check_floating_var(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(is_floating(x.dtype()), "op `", op,
               "`: std and var only support floating point dtypes, got ", x.dtype(),
               " (input shape ", x.shape_str(), ")");
}

}  // namespace

Tensor sum(const Tensor& x, const DimList& dims, bool keepdim, std::optional<DType> dtype) {
  if (!dtype)  // with an explicit dtype the caller chose (torch's fp32_set_opt_dtype)
    if (auto ac = amp::autocast_inputs<amp::AutocastOp::sum>(x)) return sum(ac[0], dims, keepdim);
  const DimList d = reduce_dims(x, dims, "sum");
  const DType od = dtype ? *dtype : (is_integral(x.dtype(), true) ? kInt64 : x.dtype());
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor in = dtype ? x.to(*dtype) : x;
    out = simple_reduce<Op::sum>(in, d, keepdim, od);
  }
  if (is_floating(od))
    record("SumBackward", {x}, {&out}, {},
           [shape = x.shape(), xd = x.dtype(), d, keepdim](const Grads& g, const Grads&) {
             return Grads{unreduce(g[0], shape, d, keepdim).to(xd).contiguous()};
           });
  return out;
}

Tensor mean(const Tensor& x, const DimList& dims, bool keepdim) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::mean>(x)) return mean(ac[0], dims, keepdim);
  const DimList d = reduce_dims(x, dims, "mean");
  MINIDL_CHECK(is_floating(x.dtype()),
               "op `mean`: could not infer output dtype. Input dtype must be either a floating "
               "point or complex dtype. Got: ",
               x.dtype(), " (input shape ", x.shape_str(), ")");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = simple_reduce<Op::mean>(x, d, keepdim, x.dtype());
  }
  record("MeanBackward", {x}, {&out}, {},
         [shape = x.shape(), d, keepdim](const Grads& g, const Grads&) {
           const double n = double(reduced_count(shape, d));
           return Grads{div(unreduce(g[0], shape, d, keepdim), n)};
         });
  return out;
}

Tensor var(const Tensor& x, const DimList& dims, double correction, bool keepdim) {
  const DimList d = reduce_dims(x, dims, "var");
  check_floating_var(x, "var");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty(keep_shape(x.shape(), d), x.dtype(), x.device());
    kernel<Op::var>(x.device())(x, out, d, correction);
    out = finish(out, x.shape(), d, keepdim);
  }
  // d var / dx = 2 (x - mean) / (N - correction)
  record("VarBackward", {x}, {&out}, {x}, [d, correction, keepdim](const Grads& g, const Grads& s) {
    const Tensor& x = s[0];
    const double n = double(reduced_count(x.shape(), d)) - correction;
    Tensor centered = sub(x, mean(x, d, true));
    return Grads{mul(unreduce(g[0], x.shape(), d, keepdim), mul(centered, 2.0 / n))};
  });
  return out;
}

Tensor std(const Tensor& x, const DimList& dims, double correction, bool keepdim) {
  const DimList d = reduce_dims(x, dims, "std");
  check_floating_var(x, "std");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(var(x, dims, correction, keepdim));
  }
  // d std / dx = (x - mean) / ((N - correction) std)
  record("StdBackward", {x}, {&out}, {x, out},
         [d, correction, keepdim](const Grads& g, const Grads& s) {
           const Tensor& x = s[0];
           const double n = double(reduced_count(x.shape(), d)) - correction;
           Tensor centered = sub(x, mean(x, d, true));
           Tensor scale = div(g[0], mul(s[1], n));  // output shape
           return Grads{mul(unreduce(scale, x.shape(), d, keepdim), centered)};
         });
  return out;
}

namespace {
// amax/amin and the full max/min: the extreme over `dims`; the gradient is split evenly among
// tied elements.
template <Op op>
Tensor extreme(const Tensor& x, const DimList& dims, bool keepdim, const char* name,
               const char* node, bool nan_ties = false) {
  const DimList d = reduce_dims(x, dims, name);
  check_nonempty(x, d, dims.empty(), name);
  Tensor out = [&] {
    NoGradGuard no_grad;
    return simple_reduce<op>(x, d, keepdim, x.dtype());
  }();
  record_extreme(node, x, out, d, keepdim, nan_ties);
  return out;
}
}  // namespace

Tensor amax(const Tensor& x, const DimList& dims, bool keepdim) {
  return extreme<Op::amax>(x, dims, keepdim, "amax", "AmaxBackward");
}
Tensor amin(const Tensor& x, const DimList& dims, bool keepdim) {
  return extreme<Op::amin>(x, dims, keepdim, "amin", "AminBackward");
}
Tensor max(const Tensor& x) {
  return extreme<Op::amax>(x, {}, false, "max", "MaxBackward", true);
}
Tensor min(const Tensor& x) {
  return extreme<Op::amin>(x, {}, false, "min", "MinBackward", true);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  std::pair<Tensor, Tensor> r;
  {
    NoGradGuard no_grad;
    r = arg_reduce(x, dim, keepdim, true, "max");
  }
  record_dim_extreme("MaxBackward", x, r, dim, keepdim);
  return r;
}

std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  std::pair<Tensor, Tensor> r;
  {
    NoGradGuard no_grad;
    r = arg_reduce(x, dim, keepdim, false, "min");
  }
  record_dim_extreme("MinBackward", x, r, dim, keepdim);
  return r;
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index(x, dim, keepdim, true);
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index(x, dim, keepdim, false);
}

Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::logsumexp>(x))
    return logsumexp(ac[0], dims, keepdim);
  const DimList d = reduce_dims(x, dims, "logsumexp");
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor in = is_floating(x.dtype()) ? x : x.to(kFloat32);  // integers -> default float
    out = simple_reduce<Op::logsumexp>(in, d, keepdim, in.dtype());
  }
  // d lse / dx = exp(x - lse) (the softmax over the reduced dims)
  record("LogsumexpBackward", {x}, {&out}, {x, out}, [d, keepdim](const Grads& g, const Grads& s) {
    const Tensor& x = s[0];
    Tensor sm = exp(sub(x, unreduce(s[1], x.shape(), d, keepdim)));
    return Grads{mul(unreduce(g[0], x.shape(), d, keepdim), sm)};
  });
  return out;
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
  Tensor out;
  {
    NoGradGuard no_grad;
    out = dims.empty() ? x.reshape(shape) : sum(x, dims, true, x.dtype()).reshape(shape);
  }
  if (is_floating(out.dtype()))
    record("SumToShapeBackward", {x}, {&out}, {}, [xs = x.shape()](const Grads& g, const Grads&) {
      return Grads{g[0].expand(xs).contiguous()};
    });
  return out;
}

}  // namespace minidl
