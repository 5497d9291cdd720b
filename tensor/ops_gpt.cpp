// Frontends of the ops a GPT trainer needs beyond the basics: tril/triu, masked_fill
// (composite: where), cumsum, multinomial, div with rounding_mode / floor_divide. Validation,
// dtype rules and autograd here; kernels in tensor/cpu/scan_select.cpp, tensor/cuda/scan_select.cu.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "autograd/function.h"
#include "tensor/ops.h"

namespace minidl {
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
  // the gradient is the same mask applied to the incoming gradient
  autograd::record(op == Op::tril ? "TrilBackward" : "TriuBackward", {x}, {&out}, {},
                   [diagonal, name](const auto& g, const auto&) {
                     return std::vector<Tensor>{tri<op>(g[0], diagonal, name)};
                   });
  return out;
}

// out = in's running sum along `dim` (suffix sums when reverse); no history. in:[..] any dtype
// the kernel supports, dim normalised, rank >= 1.
Tensor cumsum_raw(const Tensor& in, int64_t dim, bool reverse) {
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  if (out.numel() > 0) kernel<Op::cumsum>(in.device())(in, out, dim, reverse);
  return out;
}

// A 0-d tensor holding `s` as dtype `dt`.
Tensor scalar_of(Scalar s, DType dt, Device device) {
  Tensor t = empty({}, dt, device);
  t.fill_(s);
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
  return mask.expand(x.shape());
}

// Rounded division a / b in dtype dt (a and b already promoted), broadcast; no history.
template <Op op>
Tensor div_rounded_raw(const Tensor& a, const Tensor& b, DType dt) {
  NoGradGuard no_grad;
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "div");
  Tensor ea = a.to(dt).expand(shape), eb = b.to(dt).expand(shape);
  if (is_integral(dt) && eb.numel() > 0)
    MINIDL_CHECK(sum(eq(eb, Scalar(0))).item<int64_t>() == 0,
                 "ZeroDivisionError: op `div` with rounding_mode: integer division by zero "
                 "(dtype ",
                 dt, ")");
  Tensor out = empty(shape, dt, a.device());
  if (out.numel() > 0) kernel<op>(a.device())(ea, eb, out);
  return out;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return tri<Op::tril>(x, diagonal, "tril");
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  return tri<Op::triu>(x, diagonal, "triu");
}

// Composite: torch's masked_fill is where(mask, value, x) in x's dtype; a kernel of its own
// would add nothing (the where kernel already broadcasts), and where's autograd gives the
// gradient (grad with the filled positions zeroed; their sum to a tensor value).
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
  return where(m, value.to(x.device()).to(x.dtype()), x);
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value) {
  Tensor m = expanded_mask(self, mask, "masked_fill_");
  autograd::check_inplace("masked_fill_", self);
  if (self.numel() > 0) {
    Tensor v = scalar_of(value, self.dtype(), self.device()).expand(self.shape());
    kernel<Op::where>(self.device())(m, v, self, self);  // elementwise: out may alias b
  }
  self.storage()->bump_version();
  return self;
}

// Integer and bool inputs accumulate in int64 (torch); the gradient is the reverse running sum
// of the incoming gradient.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  check_defined(x, "cumsum");
  const DType dt = dtype.value_or(is_integral(x.dtype(), true) ? kInt64 : x.dtype());
  MINIDL_CHECK(dt != kBool, "op `cumsum`: dtype bool is not supported");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumsum");
  Tensor in = x.to(dt);  // differentiable cast (floating to floating)
  Tensor out;
  {
    NoGradGuard no_grad;
    out =
        x.dim() == 0 ? cumsum_raw(in.reshape({1}), 0, false).reshape({}) : cumsum_raw(in, d, false);
  }
  autograd::record("CumsumBackward", {in}, {&out}, {}, [d](const auto& g, const auto&) {
    const Tensor& go = g[0];
    return std::vector<Tensor>{go.dim() == 0 ? go : cumsum_raw(go, d, true)};
  });
  return out;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  check_defined(probs, "multinomial");
  MINIDL_CHECK(probs.dim() == 1 || probs.dim() == 2, "op `multinomial`: prob_dist must be 1 or ",
               "2 dim, got shape ", probs.shape_str());
  MINIDL_CHECK(probs.is_floating_point(), "op `multinomial`: only supports floating-point dtypes ",
               "for input, got ", probs.dtype());
  MINIDL_CHECK(num_samples > 0, "op `multinomial`: cannot sample n_sample <= 0 samples (got ",
               num_samples, ")");
  const int64_t C = probs.size(-1), B = probs.dim() == 2 ? probs.size(0) : 1;
  MINIDL_CHECK(C > 0, "op `multinomial`: no categories (shape ", probs.shape_str(), ")");
  MINIDL_CHECK(replacement || num_samples <= C, "op `multinomial`: cannot sample n_sample > ",
               "prob_dist.size(-1) samples without replacement (n_sample ", num_samples,
               ", categories ", C, ")");
  NoGradGuard no_grad;
  Tensor w = empty({B, C}, kFloat64, probs.device());
  w.copy_(probs.reshape({B, C}));  // the kernel's scratch copy
  if (B > 0) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    Tensor bad = logical_or(logical_or(lt(w, 0.0), ne(w, w)), eq(w, inf));
    Tensor positive = sum(gt(w, 0.0), {1});  // [B] int64
    std::vector<int64_t> stats =
        stack({sum(bad), amin(positive), sum(eq(sum(w, {1}), 0.0))}).tolist<int64_t>();
    MINIDL_CHECK(stats[0] == 0, "op `multinomial`: probability tensor contains either `inf`, ",
                 "`nan` or element < 0 (shape ", probs.shape_str(), ")");
    MINIDL_CHECK(stats[2] == 0, "op `multinomial`: invalid multinomial distribution (sum of ",
                 "probabilities <= 0) (shape ", probs.shape_str(), ")");
    MINIDL_CHECK(replacement || stats[1] >= num_samples, "op `multinomial`: invalid multinomial ",
                 "distribution (with replacement=False, not enough non-negative category to ",
                 "sample): ", num_samples, " samples but a row has ", stats[1],
                 " positive weights");
  }
  Tensor out = empty({B, num_samples}, kInt64, probs.device());
  kernel<Op::multinomial>(probs.device())(w, out, replacement, gen ? *gen : default_generator());
  return probs.dim() == 1 ? out.view({num_samples}) : out;
}

Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode) {
  if (!rounding_mode) return div(a, b);
  check_defined(a, "div");
  check_defined(b, "div");
  check_same_device("div", a, b);
  const std::string_view mode = *rounding_mode;
  MINIDL_CHECK(mode == "trunc" || mode == "floor", "op `div`: expected rounding_mode to be one ",
               "of None, 'trunc', or 'floor' but found '", mode, "'");
  const DType dt = result_type(a, b);
  MINIDL_CHECK(dt != kBool, "op `div` with rounding_mode '", mode, "': not implemented for ",
               "bool (shapes ", a.shape_str(), " and ", b.shape_str(), ")");
  Tensor out = mode == "trunc" ? div_rounded_raw<Op::div_trunc>(a, b, dt)
                               : div_rounded_raw<Op::div_floor>(a, b, dt);
  // torch: the rounded quotient is piecewise constant, its gradient is zero
  autograd::record("DivBackward", {a, b}, {&out}, {},
                   [ta = a.requires_grad(), tb = b.requires_grad(), sa = a.shape(), sb = b.shape(),
                    da = a.dtype(), db = b.dtype(), dev = a.device()](const auto&, const auto&) {
                     return std::vector<Tensor>{ta ? zeros(sa, da, dev) : Tensor(),
                                                tb ? zeros(sb, db, dev) : Tensor()};
                   });
  return out;
}

Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode) {
  check_defined(a, "div");
  return div(a, scalar_of(b, result_type(a, b), a.device()), rounding_mode);
}

Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return div(a, b, "floor");
}
Tensor floor_divide(const Tensor& a, Scalar b) {
  return div(a, b, "floor");
}

}  // namespace minidl
