// CPU kernels: binary elementwise arithmetic, pow, maximum/minimum, comparisons, logical ops
// and where. Inputs arrive broadcast to out's shape (any strides, 0 included) and share one
// dtype (out's, or the compared dtype for bool-valued ops); f16/bf16 compute in float.
#include <cmath>
#include <bit>
#include <type_traits>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"

namespace minidl::cpu {
namespace {

// Runs out = f(a, b) with f on opmath_t<T> values, T = out's dtype.
template <typename Dispatch, typename F>
void arith(const Tensor& a, const Tensor& b, Tensor& out, std::string_view name, Dispatch disp,
           F f) {
  disp(out.dtype(), name, [&]<typename T>() {
    using C = opmath_t<T>;
    binary_loop<T, T, T>(a, b, out,
                         [&](T x, T y) { return T(f(static_cast<C>(x), static_cast<C>(y))); });
  });
}

constexpr auto kAll = [](DType t, std::string_view op, auto&& fn) {
  return dispatch_all(t, op, fn);
};
constexpr auto kNumeric = [](DType t, std::string_view op, auto&& fn) {
  return dispatch_numeric(t, op, fn);
};
constexpr auto kFloating = [](DType t, std::string_view op, auto&& fn) {
  return dispatch_floating(t, op, fn);
};

// Integer add/sub/mul wrap around like PyTorch (unsigned arithmetic, no signed overflow).
template <typename C>
struct Wrap {
  using type = C;
};
template <typename C>
requires(std::is_integral_v<C> && !std::is_same_v<C, bool>) struct Wrap<C> {
  using type = std::make_unsigned_t<C>;
};
template <typename C>
using wrap_t = typename Wrap<C>::type;

void add_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.dtype() == kBool) {
    binary_loop<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x || y; });
    return;
  }
  arith(a, b, out, "add", kNumeric, []<typename C>(C x, C y) {
    using U = wrap_t<C>;
    return C(U(x) + U(y));
  });
}

void sub_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  arith(a, b, out, "sub", kNumeric, []<typename C>(C x, C y) {
    using U = wrap_t<C>;
    return C(U(x) - U(y));
  });
}

void mul_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.dtype() == kBool) {
    binary_loop<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x && y; });
    return;
  }
  arith(a, b, out, "mul", kNumeric, []<typename C>(C x, C y) {
    using U = wrap_t<C>;
    return C(U(x) * U(y));
  });
}

void div_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  arith(a, b, out, "div", kFloating, []<typename C>(C x, C y) { return x / y; });
}

// Integer power by squaring; negative exponents give 1/x^n truncated (PyTorch's powi).
template <typename T>
T int_pow(T base, T e) {
  if constexpr (std::is_signed_v<T>) {
    if (e < 0) {
      if (base == 1) return 1;
      if (base == -1) return (e & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = U(base);
  while (e) {
    if (e & 1) result = U(result * b);
    e = T(e >> 1);
    b = U(b * b);
  }
  return T(result);
}

// True when every stride is 0: one value broadcast to the whole shape.
bool is_broadcast_scalar(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

// pow: a constant exponent (a Scalar exponent arrives as a 0-stride tensor) takes exact fast
// paths for 0, ±0.5, ±1, ±2, 3 like PyTorch; otherwise std::pow in opmath.
void pow_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() {
    using C = opmath_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      MINIDL_FAIL("op `pow` does not support dtype bool");
    } else if constexpr (std::is_integral_v<T>) {
      binary_loop<T, T, T>(a, b, out, [](T x, T y) { return int_pow<T>(x, y); });
    } else {
      if (out.numel() > 0 && is_broadcast_scalar(b)) {
        const C e = static_cast<C>(*static_cast<const T*>(b.data_ptr()));
        auto run = [&](auto f) {
          unary_loop<T, T>(a, out, [&](T x) { return T(f(static_cast<C>(x))); });
        };
        if (e == C(2))
          run([](C x) { return x * x; });
        else if (e == C(3))
          run([](C x) { return x * x * x; });
        else if (e == C(0.5))
          run([](C x) { return std::sqrt(x); });
        else if (e == C(-0.5))
          run([](C x) { return C(1) / std::sqrt(x); });
        else if (e == C(-1))
          run([](C x) { return C(1) / x; });
        else if (e == C(-2))
          run([](C x) { return C(1) / (x * x); });
        else if (e == C(1))
          run([](C x) { return x; });
        else
          run([e](C x) { return std::pow(x, e); });
        return;
      }
      binary_loop<T, T, T>(
          a, b, out, [](T x, T y) { return T(std::pow(static_cast<C>(x), static_cast<C>(y))); });
    }
  });
}

// maximum/minimum propagate NaN.
void maximum_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  arith(a, b, out, "maximum", kAll, []<typename C>(C x, C y) {
    if constexpr (std::is_floating_point_v<C>)
      return (std::isnan(x) || x > y) ? x : y;
    else
      return x > y ? x : y;
  });
}

void minimum_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  arith(a, b, out, "minimum", kAll, []<typename C>(C x, C y) {
    if constexpr (std::is_floating_point_v<C>)
      return (std::isnan(x) || x < y) ? x : y;
    else
      return x < y ? x : y;
  });
}

// Bool-valued ops: out is bool, a and b share their own dtype.
template <typename F>
void predicate(const Tensor& a, const Tensor& b, Tensor& out, std::string_view name, F f) {
  MINIDL_CHECK(out.dtype() == kBool, "op `", name, "`: output must be bool, got ", out.dtype());
  MINIDL_CHECK(a.dtype() == b.dtype(), "op `", name, "`: internal: input dtypes differ (",
               a.dtype(), " vs ", b.dtype(), ")");
  dispatch_all(a.dtype(), name, [&]<typename T>() {
    using C = opmath_t<T>;
    binary_loop<bool, T, T>(
        a, b, out, [&](T x, T y) { return bool(f(static_cast<C>(x), static_cast<C>(y))); });
  });
}

#define MINIDL_PREDICATE(name, expr)                                    \
  void name##_kernel(const Tensor& a, const Tensor& b, Tensor& out) {   \
    predicate(a, b, out, #name, [](auto x, auto y) { return (expr); }); \
  }
MINIDL_PREDICATE(eq, x == y)
MINIDL_PREDICATE(ne, x != y)
MINIDL_PREDICATE(lt, x < y)
MINIDL_PREDICATE(le, x <= y)
MINIDL_PREDICATE(gt, x > y)
MINIDL_PREDICATE(ge, x >= y)
MINIDL_PREDICATE(logical_and, x != decltype(x)(0) && y != decltype(y)(0))
MINIDL_PREDICATE(logical_or, x != decltype(x)(0) || y != decltype(y)(0))
#undef MINIDL_PREDICATE

// c ? x : y on the bit patterns, so the loop is branch-free (random masks do not mispredict)
// and vectorises.
template <typename T>
inline T select(bool c, T x, T y) {
  using U = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  const U m = U(U(0) - U(c));
  return std::bit_cast<T>(U((std::bit_cast<U>(x) & m) | (std::bit_cast<U>(y) & U(~m))));
}

// out = cond ? a : b; cond bool, a/b/out one dtype.
void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  MINIDL_CHECK(cond.dtype() == kBool, "op `where`: condition must be bool, got ", cond.dtype());
  dispatch_all(out.dtype(), "where", [&]<typename T>() {
    auto row = [](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      const bool dense = s[0] == sizeof(T) && s[1] == 1;
      if (dense && s[2] == sizeof(T) && s[3] == sizeof(T)) {
        for (int64_t i = 0; i < n; ++i) o[i] = select(c[i], x[i], y[i]);
      } else if (dense && s[2] == sizeof(T) && s[3] == 0) {  // where(c, x, scalar): relu grads
        const T yv = *y;
        for (int64_t i = 0; i < n; ++i) o[i] = select(c[i], x[i], yv);
      } else if (dense && s[2] == 0 && s[3] == sizeof(T)) {
        const T xv = *x;
        for (int64_t i = 0; i < n; ++i) o[i] = select(c[i], xv, y[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const T xv = *reinterpret_cast<const T*>(p[2] + i * s[2]);
          const T yv = *reinterpret_cast<const T*>(p[3] + i * s[3]);
          *reinterpret_cast<T*>(p[0] + i * s[0]) =
              select(*reinterpret_cast<const bool*>(p[1] + i * s[1]), xv, yv);
        }
      }
    };
    for_each_row<4>({&out, &cond, &a, &b}, row);
  });
}

}  // namespace

void add_scaled_reduced(const Tensor& a, const Tensor& b, float alpha, Tensor& out) {
  dispatch_floating(out.dtype(), "add", [&]<typename T>() {
    if constexpr (is_reduced_float_v<T>) {
      binary_loop<T, T, T>(a, b, out, [alpha](T x, T y) {
        const float scaled = float(y) * alpha;  // rounded to f32 first, as mul() did
        return T(float(x) + scaled);
      });
    } else {
      MINIDL_FAIL("internal: add_scaled_reduced on dtype ", out.dtype());
    }
  });
}

void register_binary_kernels() {
  register_kernel<Op::add>(DeviceType::cpu, add_kernel);
  register_kernel<Op::add_scaled_reduced>(DeviceType::cpu, add_scaled_reduced);
  register_kernel<Op::sub>(DeviceType::cpu, sub_kernel);
  register_kernel<Op::mul>(DeviceType::cpu, mul_kernel);
  register_kernel<Op::div>(DeviceType::cpu, div_kernel);
  register_kernel<Op::pow>(DeviceType::cpu, pow_kernel);
  register_kernel<Op::maximum>(DeviceType::cpu, maximum_kernel);
  register_kernel<Op::minimum>(DeviceType::cpu, minimum_kernel);
  register_kernel<Op::eq>(DeviceType::cpu, eq_kernel);
  register_kernel<Op::ne>(DeviceType::cpu, ne_kernel);
  register_kernel<Op::lt>(DeviceType::cpu, lt_kernel);
  register_kernel<Op::le>(DeviceType::cpu, le_kernel);
  register_kernel<Op::gt>(DeviceType::cpu, gt_kernel);
  register_kernel<Op::ge>(DeviceType::cpu, ge_kernel);
  register_kernel<Op::logical_and>(DeviceType::cpu, logical_and_kernel);
  register_kernel<Op::logical_or>(DeviceType::cpu, logical_or_kernel);
  register_kernel<Op::where>(DeviceType::cpu, where_kernel);
}

}  // namespace minidl::cpu
