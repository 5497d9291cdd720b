// Unary op frontends (torch.neg, exp, gelu, clamp, ...): dtype rules as PyTorch (float math on
// integer/bool inputs computes in f32), output allocation, dispatch to kernel[op][device], and
// the autograd node of each differentiable op (backward written with tensor frontends).
#include <cmath>
#include <limits>
#include <numbers>

#include "autograd/function.h"
#include "tensor/autocast.h"
#include "tensor/ops.h"

namespace minidl {
namespace {

void check_defined(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
}

// Runs a kernel with in and out of dtype `dt` (the input cast first when needed).
template <Op op>
Tensor run_unary(const Tensor& x, DType dt) {
  NoGradGuard guard;  // the cast is internal: the caller records one node
  Tensor in = x.to(dt);
  Tensor out = empty(x.shape(), dt, x.device());
  if (out.numel() > 0) kernel<op>(x.device())(in, out);
  return out;
}

// Float math: floating inputs keep their dtype, integer and bool inputs compute in f32.
template <Op op>
Tensor float_unary(const Tensor& x, std::string_view name) {
  check_defined(x, name);
  return run_unary<op>(x, is_floating(x.dtype()) ? x.dtype() : kFloat32);
}

// Sign-like ops keep the input dtype; bool inputs are rejected (PyTorch).
template <Op op>
Tensor numeric_unary(const Tensor& x, std::string_view name) {
  check_defined(x, name);
  MINIDL_CHECK(x.dtype() != kBool, "op `", name, "`: not supported for bool tensors (shape ",
               x.shape_str(), ")");
  return run_unary<op>(x, x.dtype());
}

// Attaches a one-input node to `out`: dx = fn(g, saved) (saved: tensors to version-check).
template <typename F>
Tensor with_grad(Tensor out, const char* name, const Tensor& x, const std::vector<Tensor>& saved,
                 F fn) {
  autograd::record(name, {x}, {&out}, saved,
                   [fn](const auto& g, const auto& s) { return std::vector<Tensor>{fn(g[0], s)}; });
  return out;
}

using Saved = std::vector<Tensor>;

}  // namespace

Tensor neg(const Tensor& x) {
  check_defined(x, "neg");
  MINIDL_CHECK(x.dtype() != kBool,
               "op `neg`: negation, the `-` operator, on a bool tensor is not supported. If you "
               "are trying to invert a mask, use the `~` or `logical_not()` operator instead "
               "(shape ",
               x.shape_str(), ")");
  return with_grad(run_unary<Op::neg>(x, x.dtype()), "NegBackward", x, {},
                   [](const Tensor& g, const Saved&) { return neg(g); });
}

Tensor abs(const Tensor& x) {
  return with_grad(numeric_unary<Op::abs>(x, "abs"), "AbsBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return mul(g, sign(s[0])); });
}
Tensor relu(const Tensor& x) {
  Tensor y = numeric_unary<Op::relu>(x, "relu");
  return with_grad(y, "ReluBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return where(gt(s[0], 0), g, 0); });
}

// relu(conv(x)) at inference: a CPU temporary that nothing else can see (its handle and storage
// unshared, no graph to record) is overwritten in place instead of allocating a second tensor
// of the same size; anything else takes the copying path above.
Tensor relu(Tensor&& x) {
  const bool donate = x.defined() && x.is_cpu() && x.dtype() != kBool &&
                      !(GradMode::is_enabled() && x.requires_grad()) &&
                      x.impl_ptr().use_count() == 1 && x.storage().use_count() == 1;
  if (!donate) return relu(static_cast<const Tensor&>(x));
  if (x.numel() > 0) kernel<Op::relu>(x.device())(x, x);
  x.storage()->bump_version();
  return std::move(x);
}

Tensor sign(const Tensor& x) {
  check_defined(x, "sign");
  Tensor y = run_unary<Op::sign>(x, x.dtype());
  // Piecewise constant: zero gradient (like PyTorch).
  return with_grad(y, "SignBackward", x, {},
                   [](const Tensor& g, const Saved&) { return zeros_like(g); });
}

Tensor exp(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::exp>(x)) return exp(ac[0]);
  Tensor y = float_unary<Op::exp>(x, "exp");
  return with_grad(y, "ExpBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return mul(g, s[0]); });
}
Tensor log(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::log>(x)) return log(ac[0]);
  return with_grad(float_unary<Op::log>(x, "log"), "LogBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return div(g, s[0]); });
}
Tensor log1p(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::log1p>(x)) return log1p(ac[0]);
  return with_grad(float_unary<Op::log1p>(x, "log1p"), "Log1PBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return div(g, add(s[0], 1)); });
}
Tensor sqrt(const Tensor& x) {
  Tensor y = float_unary<Op::sqrt>(x, "sqrt");  // dx = g / (2 y)
  return with_grad(y, "SqrtBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return div(g, mul(s[0], 2)); });
}
Tensor rsqrt(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::rsqrt>(x)) return rsqrt(ac[0]);
  Tensor y = float_unary<Op::rsqrt>(x, "rsqrt");  // dx = -g y^3 / 2
  return with_grad(y, "RsqrtBackward", x, {y}, [](const Tensor& g, const Saved& s) {
    return mul(g, mul(mul(s[0], mul(s[0], s[0])), -0.5));
  });
}
Tensor sin(const Tensor& x) {
  return with_grad(float_unary<Op::sin>(x, "sin"), "SinBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return mul(g, cos(s[0])); });
}
Tensor cos(const Tensor& x) {
  return with_grad(float_unary<Op::cos>(x, "cos"), "CosBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return mul(g, neg(sin(s[0]))); });
}
Tensor tanh(const Tensor& x) {
  Tensor y = float_unary<Op::tanh>(x, "tanh");  // dx = g (1 - y^2)
  return with_grad(y, "TanhBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return mul(g, 1.0 - mul(s[0], s[0])); });
}
Tensor sigmoid(const Tensor& x) {
  Tensor y = float_unary<Op::sigmoid>(x, "sigmoid");  // dx = g y (1 - y)
  return with_grad(y, "SigmoidBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return mul(g, mul(s[0], 1.0 - s[0])); });
}
Tensor silu(const Tensor& x) {
  // dx = g s (1 + x (1 - s)), s = sigmoid(x)
  return with_grad(float_unary<Op::silu>(x, "silu"), "SiluBackward", x, {x},
                   [](const Tensor& g, const Saved& s) {
                     Tensor sg = sigmoid(s[0]);
                     return mul(g, mul(sg, add(mul(s[0], 1.0 - sg), 1)));
                   });
}
Tensor erf(const Tensor& x) {
  // dx = g 2/sqrt(pi) exp(-x^2)
  return with_grad(float_unary<Op::erf>(x, "erf"), "ErfBackward", x, {x},
                   [](const Tensor& g, const Saved& s) {
                     return mul(g, mul(exp(neg(mul(s[0], s[0]))), std::numbers::inv_sqrtpi * 2));
                   });
}

namespace {
// The derivative in one kernel: (grad, x) -> dx (backward formulas are never recorded).
template <Op kOp>
Tensor gelu_backward_fused(const Tensor& g, const Tensor& x) {
  Tensor gx = g.dtype() == x.dtype() ? g : g.to(x.dtype());
  if (gx.shape() != x.shape()) gx = gx.expand(x.shape());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) kernel<kOp>(x.device())(gx, x, out);
  return out;
}
}  // namespace

Tensor gelu(const Tensor& x, std::string_view approximate) {
  // exact: dx = g (Phi(x) + x phi(x)), Phi/phi the standard normal cdf/pdf
  if (approximate == "none")
    return with_grad(float_unary<Op::gelu>(x, "gelu"), "GeluBackward", x, {x},
                     [](const Tensor& g, const Saved& s) {
                       return gelu_backward_fused<Op::gelu_backward>(g, s[0]);
                     });
  // y = x/2 (1 + tanh(u)), u = k (x + c x^3): dx = g (1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3c x^2))
  if (approximate == "tanh")
    return with_grad(float_unary<Op::gelu_tanh>(x, "gelu"), "GeluBackward", x, {x},
                     [](const Tensor& g, const Saved& s) {
                       return gelu_backward_fused<Op::gelu_tanh_backward>(g, s[0]);
                     });
  MINIDL_FAIL("op `gelu`: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
}

Tensor logical_not(const Tensor& x) {
  check_defined(x, "logical_not");
  Tensor out = empty(x.shape(), kBool, x.device());
  if (out.numel() > 0) kernel<Op::logical_not>(x.device())(x, out);
  return out;
}

namespace {
// Validates clamp's bounds and returns the result dtype: PyTorch's promotion of the tensor with
// the scalar bounds (float tensors keep their dtype; an integer or bool tensor with a float
// bound computes in the default float dtype f32; a bool tensor with an integer bound in int64).
DType clamp_dtype(const Tensor& x, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max, std::string_view name) {
  check_defined(x, name);
  MINIDL_CHECK(min.has_value() || max.has_value(), "op `", name,
               "`: at least one of 'min' or 'max' must not be None");
  DType dt = x.dtype();
  if (!is_floating(dt)) {
    const bool any_float = (min && min->is_floating()) || (max && max->is_floating());
    const bool any_int = (min && min->is_integral()) || (max && max->is_integral());
    dt = any_float ? kFloat32 : (dt == kBool && any_int ? kInt64 : dt);
  }
  MINIDL_CHECK(dt != kBool, "op `", name, "`: not supported for bool tensors (shape ",
               x.shape_str(), ")");
  return dt;
}

// The bounds as doubles, ±inf for a missing one.
std::pair<double, double> clamp_bounds(const std::optional<Scalar>& min,
                                       const std::optional<Scalar>& max) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  return {min ? min->to_double() : -inf, max ? max->to_double() : inf};
}
}  // namespace

// Computes in the promoted dtype (clamp(int64 [1, 2, 3], 1.5, 2.5) is f32 [1.5, 2, 2.5], as in
// PyTorch). The gradient passes where lo <= x <= hi.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  const DType dt = clamp_dtype(x, min, max, "clamp");
  auto [lo, hi] = clamp_bounds(min, max);
  Tensor out;
  {
    NoGradGuard guard;  // the cast is internal: one ClampBackward node
    const Tensor in = x.to(dt);
    out = empty(x.shape(), dt, x.device());
    if (out.numel() > 0) kernel<Op::clamp>(x.device())(in, out, lo, hi);
  }
  return with_grad(out, "ClampBackward", x, {x},
                   [lo = lo, hi = hi](const Tensor& g, const Saved& s) {
                     return where(logical_and(ge(s[0], lo), le(s[0], hi)), g, 0);
                   });
}

// The result keeps self's dtype: bounds that would promote it (a float bound on an integer
// tensor) are refused, as in PyTorch.
Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  const DType dt = clamp_dtype(self, min, max, "clamp_");
  MINIDL_CHECK(dt == self.dtype(), "op `clamp_`: result type ", dt,
               " can't be cast to the desired output type ", self.dtype(), " (shape ",
               self.shape_str(), ")");
  auto [lo, hi] = clamp_bounds(min, max);
  autograd::check_inplace("clamp_", self);
  if (self.numel() > 0) kernel<Op::clamp>(self.device())(self, self, lo, hi);
  self.storage()->bump_version();
  return self;
}

// x * x (differentiable through mul); bool squares to int64 like torch.square.
Tensor square(const Tensor& x) {
  check_defined(x, "square");
  Tensor v = x.dtype() == kBool ? x.to(kInt64) : x;
  return mul(v, v);
}

// The gradient is cast back to the input dtype (only floating -> floating casts have one).
Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast");
  Tensor out;
  {
    NoGradGuard guard;  // one CastBackward node, whatever `to`/`clone` record
    out = x.dtype() == dtype ? x.clone() : x.to(dtype);
  }
  if (!is_floating(dtype)) return out;
  const DType in_dt = x.dtype();
  return with_grad(out, "CastBackward", x, {},
                   [in_dt](const Tensor& g, const Saved&) { return g.to(in_dt); });
}

}  // namespace minidl
