// The differentiable unary ops: the autocast hook where AMP applies, the raw op
// (tensor/ops/unary.cpp), then the one-input backward node (written with the public ops).
#include <limits>
#include <numbers>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace minidl {
namespace {

using Saved = std::vector<Tensor>;

// Attaches a one-input node to `out`: dx = fn(g, saved) (saved: tensors to version-check).
template <typename F>
Tensor with_grad(Tensor out, const char* name, const Tensor& x, const Saved& saved, F fn) {
  autograd::record(name, {x}, {&out}, saved,
                   [fn](const auto& g, const auto& s) { return std::vector<Tensor>{fn(g[0], s)}; });
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) {
  return with_grad(native::neg(x), "NegBackward", x, {},
                   [](const Tensor& g, const Saved&) { return neg(g); });
}

Tensor abs(const Tensor& x) {
  return with_grad(native::abs(x), "AbsBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return mul(g, sign(s[0])); });
}
Tensor relu(const Tensor& x) {
  Tensor y = native::relu(x);
  return with_grad(y, "ReluBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return where(gt(s[0], 0), g, 0); });
}

// A temporary with a graph to record takes the copying path; otherwise the raw op may reuse it
// (relu(conv(x)) at inference: one activation-sized allocation less).
Tensor relu(Tensor&& x) {
  if (x.defined() && GradMode::is_enabled() && x.requires_grad())
    return relu(static_cast<const Tensor&>(x));
  return native::relu(std::move(x));
}

Tensor sign(const Tensor& x) {
  Tensor y = native::sign(x);
  // Piecewise constant: zero gradient (like PyTorch).
  return with_grad(y, "SignBackward", x, {},
                   [](const Tensor& g, const Saved&) { return zeros_like(g); });
}

Tensor exp(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::exp>(x)) return exp(ac[0]);
  Tensor y = native::exp(x);
  return with_grad(y, "ExpBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return mul(g, s[0]); });
}
Tensor log(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::log>(x)) return log(ac[0]);
  return with_grad(native::log(x), "LogBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return div(g, s[0]); });
}
Tensor log1p(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::log1p>(x)) return log1p(ac[0]);
  return with_grad(native::log1p(x), "Log1PBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return div(g, add(s[0], 1)); });
}
Tensor sqrt(const Tensor& x) {
  Tensor y = native::sqrt(x);  // dx = g / (2 y)
  return with_grad(y, "SqrtBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return div(g, mul(s[0], 2)); });
}
Tensor rsqrt(const Tensor& x) {
  if (auto ac = amp::autocast_inputs<amp::AutocastOp::rsqrt>(x)) return rsqrt(ac[0]);
  Tensor y = native::rsqrt(x);  // dx = -g y^3 / 2
  return with_grad(y, "RsqrtBackward", x, {y}, [](const Tensor& g, const Saved& s) {
    return mul(g, mul(mul(s[0], mul(s[0], s[0])), -0.5));
  });
}
Tensor sin(const Tensor& x) {
  return with_grad(native::sin(x), "SinBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return mul(g, cos(s[0])); });
}
Tensor cos(const Tensor& x) {
  return with_grad(native::cos(x), "CosBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return mul(g, neg(sin(s[0]))); });
}
Tensor tanh(const Tensor& x) {
  Tensor y = native::tanh(x);  // dx = g (1 - y^2)
  return with_grad(y, "TanhBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return mul(g, 1.0 - mul(s[0], s[0])); });
}
Tensor sigmoid(const Tensor& x) {
  Tensor y = native::sigmoid(x);  // dx = g y (1 - y)
  return with_grad(y, "SigmoidBackward", x, {y},
                   [](const Tensor& g, const Saved& s) { return mul(g, mul(s[0], 1.0 - s[0])); });
}
Tensor silu(const Tensor& x) {
  // dx = g s (1 + x (1 - s)), s = sigmoid(x)
  return with_grad(native::silu(x), "SiluBackward", x, {x}, [](const Tensor& g, const Saved& s) {
    Tensor sg = sigmoid(s[0]);
    return mul(g, mul(sg, add(mul(s[0], 1.0 - sg), 1)));
  });
}
Tensor erf(const Tensor& x) {
  // dx = g 2/sqrt(pi) exp(-x^2)
  return with_grad(native::erf(x), "ErfBackward", x, {x}, [](const Tensor& g, const Saved& s) {
    return mul(g, mul(exp(neg(mul(s[0], s[0]))), std::numbers::inv_sqrtpi * 2));
  });
}

// exact: dx = g (Phi(x) + x phi(x)), Phi/phi the standard normal cdf/pdf
// tanh: y = x/2 (1 + tanh(u)), u = k (x + c x^3): dx = g (1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3c
// x^2)). The raw op has refused any other `approximate`.
Tensor gelu(const Tensor& x, std::string_view approximate) {
  Tensor y = native::gelu(x, approximate);
  if (approximate == "tanh")
    return with_grad(y, "GeluBackward", x, {x}, [](const Tensor& g, const Saved& s) {
      return gelu_backward(g, s[0], "tanh");
    });
  return with_grad(y, "GeluBackward", x, {x},
                   [](const Tensor& g, const Saved& s) { return gelu_backward(g, s[0], "none"); });
}

// The gradient passes where lo <= x <= hi (missing bounds are ±inf).
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  Tensor out = native::clamp(x, min, max);
  constexpr double inf = std::numeric_limits<double>::infinity();
  const double lo = min ? min->to_double() : -inf, hi = max ? max->to_double() : inf;
  return with_grad(out, "ClampBackward", x, {x}, [lo, hi](const Tensor& g, const Saved& s) {
    return where(logical_and(ge(s[0], lo), le(s[0], hi)), g, 0);
  });
}

Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  // Missing bounds are reported before the autograd check, as before (the raw op throws).
  if (!min && !max) return native::clamp_(self, min, max);
  autograd::check_inplace("clamp_", self);
  return native::clamp_(self, min, max);
}

// x * x (differentiable through mul); bool squares to int64 like torch.square.
Tensor square(const Tensor& x) {
  MINIDL_CHECK(x.defined(), "op `square`: undefined input tensor");
  Tensor v = x.dtype() == kBool ? x.to(kInt64) : x;
  return mul(v, v);
}

// One CastBackward node; the gradient is cast back to the input dtype (only floating ->
// floating casts have one).
Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = native::cast(x, dtype);
  if (!is_floating(dtype)) return out;
  const DType in_dt = x.dtype();
  return with_grad(out, "CastBackward", x, {},
                   [in_dt](const Tensor& g, const Saved&) { return g.to(in_dt); });
}

}  // namespace minidl
