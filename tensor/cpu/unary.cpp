// CPU kernels: unary elementwise math (in and out share a dtype; logical_not writes bool) and
// clamp. Float math runs through Eigen's vectorised array functions on contiguous rows (and on
// small float buffers for strided rows and f16/bf16, which compute in float).
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>
#include <cmath>
#include <numbers>
#include <limits>
#include <type_traits>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"

namespace minidl::cpu {
namespace {

// m elements of type T at src (byte stride) as opmath_t<T> into buf, and back. Contiguous runs
// take a plain pointer loop, which the compiler vectorises (16-bit float conversions included).
template <typename T>
void gather_opmath(const char* src, int64_t stride, int64_t m, opmath_t<T>* buf) {
  using C = opmath_t<T>;
  if (stride == int64_t(sizeof(T))) {
    const T* a = reinterpret_cast<const T*>(src);
    for (int64_t i = 0; i < m; ++i) buf[i] = C(a[i]);
  } else {
    for (int64_t i = 0; i < m; ++i) buf[i] = C(*reinterpret_cast<const T*>(src + i * stride));
  }
}
template <typename T>
void scatter_opmath(const opmath_t<T>* buf, int64_t m, char* dst, int64_t stride) {
  if (stride == int64_t(sizeof(T))) {
    T* o = reinterpret_cast<T*>(dst);
    for (int64_t i = 0; i < m; ++i) o[i] = T(buf[i]);
  } else {
    for (int64_t i = 0; i < m; ++i) *reinterpret_cast<T*>(dst + i * stride) = T(buf[i]);
  }
}

// out = ef(in) for floating T, where ef maps an Eigen array expression of opmath_t<T> values to
// another (e.g. [](const auto& a) { return a.exp(); }).
template <typename T, typename EF>
void eigen_map(const Tensor& in, Tensor& out, EF ef) {
  using C = opmath_t<T>;
  using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
  for_each_row<2>({&out, &in}, [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
    if constexpr (std::is_same_v<T, C>) {
      if (s[0] == int64_t(sizeof(T)) && s[1] == int64_t(sizeof(T))) {
        Eigen::Map<const Arr> a(reinterpret_cast<const T*>(p[1]), n);
        Eigen::Map<Arr> o(reinterpret_cast<T*>(p[0]), n);
        o = ef(a);
        return;
      }
    }
    // Strided rows and 16-bit floats: gather into a float buffer, compute, scatter back.
    constexpr int64_t kChunk = 512;
    alignas(64) C bin[kChunk];
    alignas(64) C bout[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      const char* src = p[1] + i0 * s[1];
      char* dst = p[0] + i0 * s[0];
      gather_opmath<T>(src, s[1], m, bin);
      Eigen::Map<const Arr> a(bin, m);
      Eigen::Map<Arr> o(bout, m);
      o = ef(a);
      scatter_opmath<T>(bout, m, dst, s[0]);
    }
  });
}

constexpr double kInvSqrt2 = 1.0 / std::numbers::sqrt2;
constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;

// Defines a floating-only kernel `name##_kernel` from an Eigen expression of `a`.
#define MINIDL_FLOAT_UNARY(name, expr)                             \
  void name##_kernel(const Tensor& in, Tensor& out) {              \
    dispatch_floating(out.dtype(), #name, [&]<typename T>() {      \
      using C [[maybe_unused]] = opmath_t<T>;                      \
      eigen_map<T>(in, out, [](const auto& a) { return (expr); }); \
    });                                                            \
  }

MINIDL_FLOAT_UNARY(exp, a.exp())
MINIDL_FLOAT_UNARY(log, a.log())
MINIDL_FLOAT_UNARY(log1p, a.log1p())
// Eigen's packet sqrt is an rsqrt estimate plus one Newton step (EIGEN_FAST_MATH): 1-2 ulp off
// and denormals flushed. PyTorch's sqrt is correctly rounded, and so is std::sqrt.
MINIDL_FLOAT_UNARY(sqrt, a.unaryExpr([](C x) { return std::sqrt(x); }))
MINIDL_FLOAT_UNARY(rsqrt, C(1) / a.unaryExpr([](C x) { return std::sqrt(x); }))
MINIDL_FLOAT_UNARY(sin, a.sin())
MINIDL_FLOAT_UNARY(cos, a.cos())
MINIDL_FLOAT_UNARY(tanh, a.tanh())
MINIDL_FLOAT_UNARY(sigmoid, C(1) / (C(1) + (-a).exp()))
MINIDL_FLOAT_UNARY(silu, a / (C(1) + (-a).exp()))
MINIDL_FLOAT_UNARY(erf, a.erf())
// gelu(x) = x/2 * (1 + erf(x/sqrt(2)))
MINIDL_FLOAT_UNARY(gelu, C(0.5) * a * (C(1) + (a * C(kInvSqrt2)).erf()))
// gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
MINIDL_FLOAT_UNARY(gelu_tanh,
                   C(0.5) * a * (C(1) + (C(kSqrt2OverPi) * (a + C(0.044715) * a * a * a)).tanh()))
#undef MINIDL_FLOAT_UNARY

// out = ef(g, x) for floating T: the two-input form of eigen_map (GELU gradients).
template <typename T, typename EF>
void eigen_map2(const Tensor& g, const Tensor& x, Tensor& out, EF ef) {
  using C = opmath_t<T>;
  using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
  for_each_row<3>({&out, &g, &x}, [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
    if constexpr (std::is_same_v<T, C>) {
      if (s[0] == int64_t(sizeof(T)) && s[1] == int64_t(sizeof(T)) && s[2] == int64_t(sizeof(T))) {
        Eigen::Map<Arr> o(reinterpret_cast<T*>(p[0]), n);
        o = ef(Eigen::Map<const Arr>(reinterpret_cast<const T*>(p[1]), n),
               Eigen::Map<const Arr>(reinterpret_cast<const T*>(p[2]), n));
        return;
      }
    }
    constexpr int64_t kChunk = 512;
    alignas(64) C bg[kChunk];
    alignas(64) C bx[kChunk];
    alignas(64) C bout[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      gather_opmath<T>(p[1] + i0 * s[1], s[1], m, bg);
      gather_opmath<T>(p[2] + i0 * s[2], s[2], m, bx);
      Eigen::Map<Arr> o(bout, m);
      o = ef(Eigen::Map<const Arr>(bg, m), Eigen::Map<const Arr>(bx, m));
      scatter_opmath<T>(bout, m, p[0] + i0 * s[0], s[0]);
    }
  });
}

// GELU gradients in one pass (g = grad of the output, x = input):
//   exact: dx = g (Phi(x) + x phi(x)), Phi/phi the standard normal cdf/pdf;
//   tanh: dx = g (1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3c x^2)), t = tanh(k (x + c x^3)).
void gelu_backward_kernel(const Tensor& g, const Tensor& x, Tensor& out) {
  dispatch_floating(out.dtype(), "gelu_backward", [&]<typename T>() {
    using C = opmath_t<T>;
    eigen_map2<T>(g, x, out, [](const auto& gr, const auto& a) {
      return gr * (C(0.5) * (C(1) + (a * C(kInvSqrt2)).erf()) +
                   a * (C(-0.5) * a * a).exp() * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2));
    });
  });
}
// 16-bit floats: chunks widened to float with t = tanh(k (x + c x^3)) evaluated once into a
// buffer (in the one-expression form below Eigen evaluates the tanh three times per element).
template <typename T>
void gelu_tanh_backward_half(const Tensor& g, const Tensor& x, Tensor& out) {
  using Arr = Eigen::Array<float, Eigen::Dynamic, 1>;
  for_each_row<3>({&out, &g, &x}, [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
    constexpr int64_t kChunk = 512;
    alignas(64) float bg[kChunk];
    alignas(64) float bx[kChunk];
    alignas(64) float bt[kChunk];
    alignas(64) float bout[kChunk];
    const float k = float(kSqrt2OverPi), c = 0.044715f;
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      gather_opmath<T>(p[1] + i0 * s[1], s[1], m, bg);
      gather_opmath<T>(p[2] + i0 * s[2], s[2], m, bx);
      const Eigen::Map<const Arr> gr(bg, m), a(bx, m);
      Eigen::Map<Arr> t(bt, m), o(bout, m);
      t = (k * (a + c * a * a * a)).tanh();
      o = gr * (0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * k * (1.0f + 3.0f * c * a * a));
      scatter_opmath<T>(bout, m, p[0] + i0 * s[0], s[0]);
    }
  });
}

void gelu_tanh_backward_kernel(const Tensor& g, const Tensor& x, Tensor& out) {
  dispatch_floating(out.dtype(), "gelu_tanh_backward", [&]<typename T>() {
    using C = opmath_t<T>;
    if constexpr (is_reduced_float_v<T>) {
      gelu_tanh_backward_half<T>(g, x, out);
      return;
    }
    eigen_map2<T>(g, x, out, [](const auto& gr, const auto& a) {
      const C k = C(kSqrt2OverPi), c = C(0.044715);
      const auto t = (k * (a + c * a * a * a)).tanh();
      return gr *
             (C(0.5) * (C(1) + t) + C(0.5) * a * (C(1) - t * t) * k * (C(1) + C(3) * c * a * a));
    });
  });
}

// Integer negation wraps (two's complement) like PyTorch instead of overflowing.
template <typename T>
inline T wrap_neg(T x) {
  if constexpr (std::is_same_v<T, bool>)
    return x;  // unreachable: frontends reject bool
  else if constexpr (std::is_integral_v<T>)
    return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
  else
    return T(-static_cast<opmath_t<T>>(x));
}

void neg_kernel(const Tensor& in, Tensor& out) {
  dispatch_numeric(out.dtype(), "neg", [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>)
      eigen_map<T>(in, out, [](const auto& a) { return -a; });
    else
      unary_loop<T, T>(in, out, [](T x) { return wrap_neg(x); });
  });
}

void abs_kernel(const Tensor& in, Tensor& out) {
  dispatch_numeric(out.dtype(), "abs", [&]<typename T>() {
    if constexpr (is_float_v<T>)
      eigen_map<T>(in, out, [](const auto& a) { return a.abs(); });
    else if constexpr (std::is_unsigned_v<T>)
      unary_loop<T, T>(in, out, [](T x) { return x; });
    else
      unary_loop<T, T>(in, out, [](T x) { return x < 0 ? wrap_neg(x) : x; });
  });
}

// sign: -1, 0 or 1 (NaN -> 0 as PyTorch's CPU kernel); bool is the identity.
void sign_kernel(const Tensor& in, Tensor& out) {
  dispatch_all(out.dtype(), "sign", [&]<typename T>() {
    using C = opmath_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      unary_loop<T, T>(in, out, [](T x) { return x; });
    } else {
      unary_loop<T, T>(in, out, [](T x) {
        const C v = static_cast<C>(x);
        return T(static_cast<C>(int(C(0) < v) - int(v < C(0))));
      });
    }
  });
}

// relu keeps NaN (x < 0 is false for NaN).
void relu_kernel(const Tensor& in, Tensor& out) {
  dispatch_numeric(out.dtype(), "relu", [&]<typename T>() {
    using C = opmath_t<T>;
    unary_loop<T, T>(in, out, [](T x) {
      const C v = static_cast<C>(x);
      return v < C(0) ? T(C(0)) : x;
    });
  });
}

void logical_not_kernel(const Tensor& in, Tensor& out) {
  MINIDL_CHECK(out.dtype() == kBool, "op `logical_not`: output must be bool, got ", out.dtype());
  dispatch_all(in.dtype(), "logical_not", [&]<typename T>() {
    using C = opmath_t<T>;
    unary_loop<bool, T>(in, out, [](T x) { return static_cast<C>(x) == C(0); });
  });
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

// out = min(max(in, lo), hi); NaN inputs stay NaN; lo > hi gives hi (PyTorch).
void clamp_kernel(const Tensor& in, Tensor& out, double lo, double hi) {
  dispatch_numeric(out.dtype(), "clamp", [&]<typename T>() {
    using C = opmath_t<T>;
    if constexpr (is_float_v<T>) {
      if (std::isnan(lo) || std::isnan(hi)) {  // a NaN bound makes every result NaN (PyTorch)
        unary_loop<T, T>(in, out, [](T) { return T(std::numeric_limits<C>::quiet_NaN()); });
        return;
      }
      const C l = C(lo), h = C(hi);
      unary_loop<T, T>(in, out, [=](T x) {
        C v = static_cast<C>(x);
        v = v < l ? l : v;
        v = v > h ? h : v;
        return T(v);
      });
    } else {
      const T l = int_bound<T>(lo, true), h = int_bound<T>(hi, false);
      unary_loop<T, T>(in, out, [=](T x) {
        T v = x < l ? l : x;
        return v > h ? h : v;
      });
    }
  });
}

}  // namespace

void register_unary_kernels() {
  register_kernel<Op::neg>(DeviceType::cpu, neg_kernel);
  register_kernel<Op::abs>(DeviceType::cpu, abs_kernel);
  register_kernel<Op::sign>(DeviceType::cpu, sign_kernel);
  register_kernel<Op::exp>(DeviceType::cpu, exp_kernel);
  register_kernel<Op::log>(DeviceType::cpu, log_kernel);
  register_kernel<Op::log1p>(DeviceType::cpu, log1p_kernel);
  register_kernel<Op::sqrt>(DeviceType::cpu, sqrt_kernel);
  register_kernel<Op::rsqrt>(DeviceType::cpu, rsqrt_kernel);
  register_kernel<Op::sin>(DeviceType::cpu, sin_kernel);
  register_kernel<Op::cos>(DeviceType::cpu, cos_kernel);
  register_kernel<Op::tanh>(DeviceType::cpu, tanh_kernel);
  register_kernel<Op::sigmoid>(DeviceType::cpu, sigmoid_kernel);
  register_kernel<Op::relu>(DeviceType::cpu, relu_kernel);
  register_kernel<Op::gelu>(DeviceType::cpu, gelu_kernel);
  register_kernel<Op::gelu_tanh>(DeviceType::cpu, gelu_tanh_kernel);
  register_kernel<Op::gelu_backward>(DeviceType::cpu, gelu_backward_kernel);
  register_kernel<Op::gelu_tanh_backward>(DeviceType::cpu, gelu_tanh_backward_kernel);
  register_kernel<Op::silu>(DeviceType::cpu, silu_kernel);
  register_kernel<Op::erf>(DeviceType::cpu, erf_kernel);
  register_kernel<Op::logical_not>(DeviceType::cpu, logical_not_kernel);
  register_kernel<Op::clamp>(DeviceType::cpu, clamp_kernel);
}

}  // namespace minidl::cpu
