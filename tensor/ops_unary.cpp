// Unary op frontends (torch.neg, exp, gelu, clamp, ...): dtype rules as PyTorch (float math on
// integer/bool inputs computes in f32), output allocation, dispatch to kernel[op][device].
#include <cmath>
#include <limits>

#include "tensor/ops.h"

namespace minidl {
namespace {

void check_defined(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
}

// Runs a kernel with in and out of dtype `dt` (the input cast first when needed).
template <Op op>
Tensor run_unary(const Tensor& x, DType dt) {
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

}  // namespace

Tensor neg(const Tensor& x) {
  check_defined(x, "neg");
  MINIDL_CHECK(x.dtype() != kBool,
               "op `neg`: negation, the `-` operator, on a bool tensor is not supported. If you "
               "are trying to invert a mask, use the `~` or `logical_not()` operator instead "
               "(shape ",
               x.shape_str(), ")");
  return run_unary<Op::neg>(x, x.dtype());
}

Tensor abs(const Tensor& x) {
  return numeric_unary<Op::abs>(x, "abs");
}
Tensor relu(const Tensor& x) {
  return numeric_unary<Op::relu>(x, "relu");
}

Tensor sign(const Tensor& x) {
  check_defined(x, "sign");
  return run_unary<Op::sign>(x, x.dtype());
}

Tensor exp(const Tensor& x) {
  return float_unary<Op::exp>(x, "exp");
}
Tensor log(const Tensor& x) {
  return float_unary<Op::log>(x, "log");
}
Tensor log1p(const Tensor& x) {
  return float_unary<Op::log1p>(x, "log1p");
}
Tensor sqrt(const Tensor& x) {
  return float_unary<Op::sqrt>(x, "sqrt");
}
Tensor rsqrt(const Tensor& x) {
  return float_unary<Op::rsqrt>(x, "rsqrt");
}
Tensor sin(const Tensor& x) {
  return float_unary<Op::sin>(x, "sin");
}
Tensor cos(const Tensor& x) {
  return float_unary<Op::cos>(x, "cos");
}
Tensor tanh(const Tensor& x) {
  return float_unary<Op::tanh>(x, "tanh");
}
Tensor sigmoid(const Tensor& x) {
  return float_unary<Op::sigmoid>(x, "sigmoid");
}
Tensor silu(const Tensor& x) {
  return float_unary<Op::silu>(x, "silu");
}
Tensor erf(const Tensor& x) {
  return float_unary<Op::erf>(x, "erf");
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return float_unary<Op::gelu>(x, "gelu");
  if (approximate == "tanh") return float_unary<Op::gelu_tanh>(x, "gelu");
  MINIDL_FAIL("op `gelu`: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
}

Tensor logical_not(const Tensor& x) {
  check_defined(x, "logical_not");
  Tensor out = empty(x.shape(), kBool, x.device());
  if (out.numel() > 0) kernel<Op::logical_not>(x.device())(x, out);
  return out;
}

namespace {
// Validates clamp's bounds; returns (lo, hi) with ±inf for a missing bound.
std::pair<double, double> clamp_bounds(const Tensor& x, std::optional<double> min,
                                       std::optional<double> max, std::string_view name) {
  check_defined(x, name);
  MINIDL_CHECK(min.has_value() || max.has_value(), "op `", name,
               "`: at least one of 'min' or 'max' must not be None");
  MINIDL_CHECK(x.dtype() != kBool, "op `", name, "`: not supported for bool tensors (shape ",
               x.shape_str(), ")");
  constexpr double inf = std::numeric_limits<double>::infinity();
  return {min.value_or(-inf), max.value_or(inf)};
}
}  // namespace

// Integer tensors keep their dtype (the bounds are rounded inwards to integers).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  auto [lo, hi] = clamp_bounds(x, min, max, "clamp");
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) kernel<Op::clamp>(x.device())(x, out, lo, hi);
  return out;
}

Tensor& clamp_(Tensor& self, std::optional<double> min, std::optional<double> max) {
  auto [lo, hi] = clamp_bounds(self, min, max, "clamp_");
  if (self.numel() > 0) kernel<Op::clamp>(self.device())(self, self, lo, hi);
  self.storage()->bump_version();
  return self;
}

// x * x; bool squares to int64 like torch.square.
Tensor square(const Tensor& x) {
  check_defined(x, "square");
  Tensor v = x.dtype() == kBool ? x.to(kInt64) : x;
  return mul(v, v);
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast");
  return x.dtype() == dtype ? x.clone() : x.to(dtype);
}

}  // namespace minidl
