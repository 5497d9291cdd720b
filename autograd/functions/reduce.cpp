// The differentiable reductions: the autocast hook where AMP applies, the raw op
// (tensor/ops/reduce.cpp), then the backward node when the result is floating.
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {
namespace {

using autograd::record;
using Grads = std::vector<Tensor>;

// The normalised, sorted dims the raw op reduced (it has checked `dims` already): every dim
// when `dims` is empty, none for a 0-d tensor.
DimList reduced_dims(const Tensor& x, const DimList& dims) {
  const int64_t nd = x.dim();
  DimList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) out.push_back(d);
    return out;
  }
  if (nd == 0) return out;
  for (int64_t d : dims) out.push_back(d < 0 ? d + nd : d);
  std::sort(out.begin(), out.end());
  return out;
}

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

// amax/amin and the full max/min: the raw extreme, then its node.
Tensor extreme(Tensor out, const Tensor& x, const DimList& dims, bool keepdim, const char* node,
               bool nan_ties = false) {
  record_extreme(node, x, out, reduced_dims(x, dims), keepdim, nan_ties);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const DimList& dims, bool keepdim, std::optional<DType> dtype) {
  if (!dtype)  // with an explicit dtype the caller chose (torch's fp32_set_opt_dtype)
    if (auto ac = amp::autocast_inputs<amp::AutocastOp::sum>(x)) return sum(ac[0], dims, keepdim);
  Tensor out = native::sum(x, dims, keepdim, dtype);
  const DimList d = reduced_dims(x, dims);
  if (is_floating(out.dtype()))
    record("SumBackward", {x}, {&out}, {},
           [shape = x.shape(), xd = x.dtype(), d, keepdim](const Grads& g, const Grads&) {
             return Grads{unreduce(g[0], shape, d, keepdim).to(xd).contiguous()};
           });
  return out;
}

Tensor mean(const Tensor& x, const DimList& dims, bool keepdim) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::mean>(x)) return mean(ac[0], dims, keepdim);
  Tensor out = native::mean(x, dims, keepdim);
  record("MeanBackward", {x}, {&out}, {},
         [shape = x.shape(), d = reduced_dims(x, dims), keepdim](const Grads& g, const Grads&) {
           const double n = double(reduced_count(shape, d));
           return Grads{div(unreduce(g[0], shape, d, keepdim), n)};
         });
  return out;
}

Tensor var(const Tensor& x, const DimList& dims, double correction, bool keepdim) {
  Tensor out = native::var(x, dims, correction, keepdim);
  // d var / dx = 2 (x - mean) / (N - correction)
  record("VarBackward", {x}, {&out}, {x},
         [d = reduced_dims(x, dims), correction, keepdim](const Grads& g, const Grads& s) {
           const Tensor& x = s[0];
           const double n = double(reduced_count(x.shape(), d)) - correction;
           Tensor centered = sub(x, mean(x, d, true));
           return Grads{mul(unreduce(g[0], x.shape(), d, keepdim), mul(centered, 2.0 / n))};
         });
  return out;
}

Tensor std(const Tensor& x, const DimList& dims, double correction, bool keepdim) {
  Tensor out = native::std(x, dims, correction, keepdim);
  // d std / dx = (x - mean) / ((N - correction) std)
  record("StdBackward", {x}, {&out}, {x, out},
         [d = reduced_dims(x, dims), correction, keepdim](const Grads& g, const Grads& s) {
           const Tensor& x = s[0];
           const double n = double(reduced_count(x.shape(), d)) - correction;
           Tensor centered = sub(x, mean(x, d, true));
           Tensor scale = div(g[0], mul(s[1], n));  // output shape
           return Grads{mul(unreduce(scale, x.shape(), d, keepdim), centered)};
         });
  return out;
}

Tensor amax(const Tensor& x, const DimList& dims, bool keepdim) {
  return extreme(native::amax(x, dims, keepdim), x, dims, keepdim, "AmaxBackward");
}
Tensor amin(const Tensor& x, const DimList& dims, bool keepdim) {
  return extreme(native::amin(x, dims, keepdim), x, dims, keepdim, "AminBackward");
}
Tensor max(const Tensor& x) {
  return extreme(native::max(x), x, {}, false, "MaxBackward", true);
}
Tensor min(const Tensor& x) {
  return extreme(native::min(x), x, {}, false, "MinBackward", true);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  std::pair<Tensor, Tensor> r = native::max(x, dim, keepdim);
  record_dim_extreme("MaxBackward", x, r, dim, keepdim);
  return r;
}

std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  std::pair<Tensor, Tensor> r = native::min(x, dim, keepdim);
  record_dim_extreme("MinBackward", x, r, dim, keepdim);
  return r;
}

Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::logsumexp>(x))
    return logsumexp(ac[0], dims, keepdim);
  Tensor out = native::logsumexp(x, dims, keepdim);
  // d lse / dx = exp(x - lse) (the softmax over the reduced dims)
  record("LogsumexpBackward", {x}, {&out}, {x, out},
         [d = reduced_dims(x, dims), keepdim](const Grads& g, const Grads& s) {
           const Tensor& x = s[0];
           Tensor sm = exp(sub(x, unreduce(s[1], x.shape(), d, keepdim)));
           return Grads{mul(unreduce(g[0], x.shape(), d, keepdim), sm)};
         });
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (x.defined() && x.shape() == shape) return x;  // nothing to sum: x itself, no node
  Tensor out = native::sum_to_shape(x, shape);
  if (is_floating(out.dtype()))
    record("SumToShapeBackward", {x}, {&out}, {}, [xs = x.shape()](const Grads& g, const Grads&) {
      return Grads{g[0].expand(xs).contiguous()};
    });
  return out;
}

}  // namespace minidl
