// The raw unary ops (neg, exp, gelu, clamp, cast, ...): dtype rules as PyTorch (float math on
// integer/bool inputs computes in f32), output allocation and dispatch to kernel[op][device].
// No history here: the differentiable forms are autograd/functions/unary.cpp.
#include <limits>
#include <utility>

#include "tensor/ops.h"

namespace minidl::native {
namespace {

void check_defined(const Tensor& x, std::string_view op) {
  MINIDL_CHECK(x.defined(), "op `", op, "`: undefined input tensor");
}

// Runs a kernel with in and out of dtype `dt` (the input cast first when needed).
template <Op op>
Tensor run_unary(const Tensor& x, DType dt) {
  Tensor in = to(x, dt);
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

// relu(conv(x)) at inference: a CPU temporary that nothing else can see (its handle and storage
// unshared) is overwritten in place instead of allocating a second tensor of the same size;
// anything else takes the copying path above. (The public relu(Tensor&&) comes here only when
// no graph is to be recorded.)
Tensor relu(Tensor&& x) {
  const bool donate = x.defined() && x.is_cpu() && x.dtype() != kBool &&
                      x.impl_ptr().use_count() == 1 && x.storage().use_count() == 1;
  if (!donate) return relu(static_cast<const Tensor&>(x));
  if (x.numel() > 0) kernel<Op::relu>(x.device())(x, x);
  x.storage()->bump_version();
  return std::move(x);
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

Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate) {
  MINIDL_CHECK(approximate == "none" || approximate == "tanh",
               "op `gelu_backward`: approximate must be \"none\" or \"tanh\", got \"", approximate,
               "\"");
  Tensor g = grad.dtype() == x.dtype() ? grad : to(grad, x.dtype());
  if (g.shape() != x.shape()) g = expand(g, x.shape());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if (approximate == "tanh")
    kernel<Op::gelu_tanh_backward>(x.device())(g, x, out);
  else
    kernel<Op::gelu_backward>(x.device())(g, x, out);
  return out;
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
// PyTorch).
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  const DType dt = clamp_dtype(x, min, max, "clamp");
  auto [lo, hi] = clamp_bounds(min, max);
  const Tensor in = to(x, dt);
  Tensor out = empty(x.shape(), dt, x.device());
  if (out.numel() > 0) kernel<Op::clamp>(x.device())(in, out, lo, hi);
  return out;
}

// The result keeps self's dtype: bounds that would promote it (a float bound on an integer
// tensor) are refused, as in PyTorch.
Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  const DType dt = clamp_dtype(self, min, max, "clamp_");
  MINIDL_CHECK(dt == self.dtype(), "op `clamp_`: result type ", dt,
               " can't be cast to the desired output type ", self.dtype(), " (shape ",
               self.shape_str(), ")");
  auto [lo, hi] = clamp_bounds(min, max);
  if (self.numel() > 0) kernel<Op::clamp>(self.device())(self, self, lo, hi);
  self.storage()->bump_version();
  return self;
}

// x * x; bool squares to int64 like torch.square.
Tensor square(const Tensor& x) {
  check_defined(x, "square");
  Tensor v = x.dtype() == kBool ? to(x, kInt64) : x;
  return mul(v, v);
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast");
  return x.dtype() == dtype ? clone(x) : to(x, dtype);
}

}  // namespace minidl::native
