// CUDA kernels: unary elementwise math (in and out share a dtype; logical_not writes bool) and
// clamp. Mirrors tensor/cpu/unary.cpp: same dtypes per op, same formulas, f16/bf16 computed in
// float, NaN kept by relu and clamp, integer neg/abs wrapping like PyTorch.
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

// float / double overloads of the CUDA math library (the accurate versions, no fast-math).
#define MINIDL_MATH1(name, ffn, dfn)        \
  __device__ inline float name(float x) {   \
    return ffn(x);                          \
  }                                         \
  __device__ inline double name(double x) { \
    return dfn(x);                          \
  }
MINIDL_MATH1(m_exp, expf, exp)
MINIDL_MATH1(m_log, logf, log)
MINIDL_MATH1(m_log1p, log1pf, log1p)
MINIDL_MATH1(m_sqrt, sqrtf, sqrt)
MINIDL_MATH1(m_sin, sinf, sin)
MINIDL_MATH1(m_cos, cosf, cos)
MINIDL_MATH1(m_tanh, tanhf, tanh)
MINIDL_MATH1(m_erf, erff, erf)
MINIDL_MATH1(m_abs, fabsf, fabs)
#undef MINIDL_MATH1

constexpr double kInvSqrt2 = 1.0 / std::numbers::sqrt2;
constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;

// out = T(Op::f(C(in))) with C = opmath_t<T>.
template <typename T, typename Op>
struct MapOp {
  __device__ T operator()(T x) const { return from_op<T>(Op::f(to_op(x))); }
};

// Float-only ops, each `f` written like the CPU kernel's Eigen expression.
#define MINIDL_FLOAT_OP(Name, str, expr)     \
  struct Name {                              \
    static constexpr const char* name = str; \
    template <typename C>                    \
    __device__ static C f(C a) {             \
      return (expr);                         \
    }                                        \
  };
MINIDL_FLOAT_OP(ExpOp, "exp", m_exp(a))
MINIDL_FLOAT_OP(LogOp, "log", m_log(a))
MINIDL_FLOAT_OP(Log1pOp, "log1p", m_log1p(a))
MINIDL_FLOAT_OP(SqrtOp, "sqrt", m_sqrt(a))
MINIDL_FLOAT_OP(RsqrtOp, "rsqrt", C(1) / m_sqrt(a))
MINIDL_FLOAT_OP(SinOp, "sin", m_sin(a))
MINIDL_FLOAT_OP(CosOp, "cos", m_cos(a))
MINIDL_FLOAT_OP(TanhOp, "tanh", m_tanh(a))
MINIDL_FLOAT_OP(SigmoidOp, "sigmoid", C(1) / (C(1) + m_exp(-a)))
MINIDL_FLOAT_OP(SiluOp, "silu", a / (C(1) + m_exp(-a)))
MINIDL_FLOAT_OP(ErfOp, "erf", m_erf(a))
// gelu(x) = x/2 * (1 + erf(x/sqrt(2)))
MINIDL_FLOAT_OP(GeluOp, "gelu", C(0.5) * a * (C(1) + m_erf(a * C(kInvSqrt2))))
// gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
MINIDL_FLOAT_OP(GeluTanhOp, "gelu_tanh",
                C(0.5) * a * (C(1) + m_tanh(C(kSqrt2OverPi) * (a + C(0.044715) * a * a * a))))
#undef MINIDL_FLOAT_OP

template <typename Op>
void float_kernel(const Tensor& in, Tensor& out) {
  dispatch_floating(out.dtype(), Op::name,
                    [&]<typename T>() { launch_elementwise<T, T>(out, MapOp<T, Op>{}, in); });
}

// Integer negation wraps (two's complement) like PyTorch instead of overflowing.
template <typename T>
__device__ inline T wrap_neg(T x) {
  if constexpr (std::is_integral_v<T>)
    return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
  else
    return from_op<T>(-to_op(x));
}

template <typename T>
struct Neg {
  __device__ T operator()(T x) const { return wrap_neg(x); }
};
template <typename T>
struct Abs {
  __device__ T operator()(T x) const {
    if constexpr (is_float_v<T>)
      return from_op<T>(m_abs(to_op(x)));
    else if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < 0 ? wrap_neg(x) : x;
  }
};
// sign: -1, 0 or 1 (NaN -> 0 as PyTorch's CPU kernel); bool is the identity.
template <typename T>
struct Sign {
  __device__ T operator()(T x) const {
    using C = opmath_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else if constexpr (std::is_unsigned_v<T>) {
      return T(x != 0);
    } else {
      const C v = to_op(x);
      return T(static_cast<C>(int(C(0) < v) - int(v < C(0))));
    }
  }
};
// relu keeps NaN (x < 0 is false for NaN) and -0.
template <typename T>
struct Relu {
  __device__ T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return to_op(x) < opmath_t<T>(0) ? T(opmath_t<T>(0)) : x;
  }
};
template <typename T>
struct LogicalNot {
  __device__ bool operator()(T x) const { return to_op(x) == opmath_t<T>(0); }
};

void neg_kernel(const Tensor& in, Tensor& out) {
  dispatch_numeric_types(out.dtype(), "neg",
                         [&]<typename T>() { launch_elementwise<T, T>(out, Neg<T>{}, in); });
}
void abs_kernel(const Tensor& in, Tensor& out) {
  dispatch_numeric_types(out.dtype(), "abs",
                         [&]<typename T>() { launch_elementwise<T, T>(out, Abs<T>{}, in); });
}
void sign_kernel(const Tensor& in, Tensor& out) {
  dispatch_all(out.dtype(), "sign",
               [&]<typename T>() { launch_elementwise<T, T>(out, Sign<T>{}, in); });
}
void relu_kernel(const Tensor& in, Tensor& out) {
  dispatch_numeric_types(out.dtype(), "relu",
                         [&]<typename T>() { launch_elementwise<T, T>(out, Relu<T>{}, in); });
}
void logical_not_kernel(const Tensor& in, Tensor& out) {
  MINIDL_CHECK(out.dtype() == kBool, "op `logical_not`: output must be bool, got ", out.dtype());
  dispatch_all(in.dtype(), "logical_not",
               [&]<typename T>() { launch_elementwise<bool, T>(out, LogicalNot<T>{}, in); });
}

// Integer bounds: the integers inside [lo, hi], saturated to T's range (±inf = no bound).
template <typename T>
T int_bound(double v, bool lower) {
  constexpr double tmin = double(std::numeric_limits<T>::lowest());
  constexpr double tmax = double(std::numeric_limits<T>::max());
  double r = lower ? std::ceil(v) : std::floor(v);
  if (!(r > tmin)) return std::numeric_limits<T>::lowest();  // also NaN
  if (r >= tmax) return std::numeric_limits<T>::max();
  return T(r);
}

// Floats: bounds in opmath (C), compared like the CPU kernel so NaN inputs stay NaN.
template <typename T>
struct ClampFloat {
  opmath_t<T> lo, hi;
  __device__ T operator()(T x) const {
    auto v = to_op(x);
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    return from_op<T>(v);
  }
};
template <typename T>
struct ClampInt {
  T lo, hi;
  __device__ T operator()(T x) const {
    T v = x < lo ? lo : x;
    return v > hi ? hi : v;
  }
};

// out = min(max(in, lo), hi); NaN inputs stay NaN; lo > hi gives hi (PyTorch).
void clamp_kernel(const Tensor& in, Tensor& out, double lo, double hi) {
  dispatch_numeric_types(out.dtype(), "clamp", [&]<typename T>() {
    using C = opmath_t<T>;
    if constexpr (is_float_v<T>) {
      if (std::isnan(lo) || std::isnan(hi)) {  // a NaN bound makes every result NaN (PyTorch)
        launch_elementwise<T>(out, Constant<T>{T(std::numeric_limits<C>::quiet_NaN())});
        return;
      }
      launch_elementwise<T, T>(out, ClampFloat<T>{C(lo), C(hi)}, in);
    } else {
      launch_elementwise<T, T>(out, ClampInt<T>{int_bound<T>(lo, true), int_bound<T>(hi, false)},
                               in);
    }
  });
}

// GELU gradients in one pass (grad, x) in opmath (the CPU kernels' formulas).
template <typename T>
struct GeluBackward {
  __device__ T operator()(T gt, T xt) const {
    using C = opmath_t<T>;
    const C g = to_op(gt), x = to_op(xt);
    const C cdf = C(0.5) * (C(1) + erf(x * C(0.70710678118654752440)));
    const C pdf = exp(C(-0.5) * x * x) * C(0.39894228040143267794);
    return from_op<T>(g * (cdf + x * pdf));
  }
};
template <typename T>
struct GeluTanhBackward {
  __device__ T operator()(T gt, T xt) const {
    using C = opmath_t<T>;
    const C g = to_op(gt), x = to_op(xt);
    const C k = C(0.79788456080286535588), c = C(0.044715), x2 = x * x;
    const C t = tanh(k * (x + c * x2 * x));
    return from_op<T>(
        g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3) * c * x2)));
  }
};

void gelu_backward_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "gelu_backward", [&]<typename T>() {
    launch_elementwise<T, T, T>(out, GeluBackward<T>{}, a, b);
  });
}
void gelu_tanh_backward_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "gelu_tanh_backward", [&]<typename T>() {
    launch_elementwise<T, T, T>(out, GeluTanhBackward<T>{}, a, b);
  });
}

}  // namespace

void register_unary_kernels() {
  register_kernel<Op::neg>(DeviceType::cuda, neg_kernel);
  register_kernel<Op::abs>(DeviceType::cuda, abs_kernel);
  register_kernel<Op::sign>(DeviceType::cuda, sign_kernel);
  register_kernel<Op::exp>(DeviceType::cuda, float_kernel<ExpOp>);
  register_kernel<Op::log>(DeviceType::cuda, float_kernel<LogOp>);
  register_kernel<Op::log1p>(DeviceType::cuda, float_kernel<Log1pOp>);
  register_kernel<Op::sqrt>(DeviceType::cuda, float_kernel<SqrtOp>);
  register_kernel<Op::rsqrt>(DeviceType::cuda, float_kernel<RsqrtOp>);
  register_kernel<Op::sin>(DeviceType::cuda, float_kernel<SinOp>);
  register_kernel<Op::cos>(DeviceType::cuda, float_kernel<CosOp>);
  register_kernel<Op::tanh>(DeviceType::cuda, float_kernel<TanhOp>);
  register_kernel<Op::sigmoid>(DeviceType::cuda, float_kernel<SigmoidOp>);
  register_kernel<Op::relu>(DeviceType::cuda, relu_kernel);
  register_kernel<Op::gelu>(DeviceType::cuda, float_kernel<GeluOp>);
  register_kernel<Op::gelu_tanh>(DeviceType::cuda, float_kernel<GeluTanhOp>);
  register_kernel<Op::silu>(DeviceType::cuda, float_kernel<SiluOp>);
  register_kernel<Op::erf>(DeviceType::cuda, float_kernel<ErfOp>);
  register_kernel<Op::logical_not>(DeviceType::cuda, logical_not_kernel);
  register_kernel<Op::clamp>(DeviceType::cuda, clamp_kernel);
  register_kernel<Op::gelu_backward>(DeviceType::cuda, gelu_backward_kernel);
  register_kernel<Op::gelu_tanh_backward>(DeviceType::cuda, gelu_tanh_backward_kernel);
}

}  // namespace minidl::cuda
