// CUDA kernels: binary elementwise arithmetic, pow, maximum/minimum, comparisons, logical ops and
// where. Mirrors tensor/cpu/binary.cpp: inputs arrive broadcast to out's shape and share one
// dtype (out's, or the compared dtype for bool-valued ops); f16/bf16 compute in float.
#include <type_traits>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

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

template <typename C>
__device__ inline bool is_nan(C x) {
  if constexpr (std::is_floating_point_v<C>)
    return x != x;
  else
    return false;
}

// out = T(Op::f(C(x), C(y))) with C = opmath_t<T>, like the CPU kernel's `arith`.
template <typename T, typename Op>
struct Arith {
  __device__ T operator()(T x, T y) const { return from_op<T>(Op::f(to_op(x), to_op(y))); }
};
struct AddOp {
  template <typename C>
  __device__ static C f(C x, C y) {
    return C(wrap_t<C>(x) + wrap_t<C>(y));
  }
};
struct SubOp {
  template <typename C>
  __device__ static C f(C x, C y) {
    return C(wrap_t<C>(x) - wrap_t<C>(y));
  }
};
struct MulOp {
  template <typename C>
  __device__ static C f(C x, C y) {
    return C(wrap_t<C>(x) * wrap_t<C>(y));
  }
};
struct DivOp {
  template <typename C>
  __device__ static C f(C x, C y) {
    return x / y;
  }
};
// bool add/mul are or/and.
struct BoolAdd {
  __device__ bool operator()(bool x, bool y) const { return x || y; }
};
struct BoolMul {
  __device__ bool operator()(bool x, bool y) const { return x && y; }
};

// maximum (is_max) / minimum, propagating NaN from either side.
template <typename T>
struct MinMax {
  bool is_max;
  __device__ T operator()(T x, T y) const {
    const auto a = to_op(x), b = to_op(y);
    return from_op<T>((is_nan(a) || (is_max ? a > b : a < b)) ? a : b);  // like T(C(..))
  }
};

template <typename Op>
void arith_numeric(const Tensor& a, const Tensor& b, Tensor& out, const char* name) {
  dispatch_numeric_types(out.dtype(), name, [&]<typename T>() {
    launch_elementwise<T, T, T>(out, Arith<T, Op>{}, a, b);
  });
}

void add_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.dtype() == kBool) return launch_elementwise<bool, bool, bool>(out, BoolAdd{}, a, b);
  arith_numeric<AddOp>(a, b, out, "add");
}
void sub_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  arith_numeric<SubOp>(a, b, out, "sub");
}
void mul_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.dtype() == kBool) return launch_elementwise<bool, bool, bool>(out, BoolMul{}, a, b);
  arith_numeric<MulOp>(a, b, out, "mul");
}
void div_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() {
    launch_elementwise<T, T, T>(out, Arith<T, DivOp>{}, a, b);
  });
}
void min_max(const Tensor& a, const Tensor& b, Tensor& out, bool is_max) {
  dispatch_all(out.dtype(), is_max ? "maximum" : "minimum",
               [&]<typename T>() { launch_elementwise<T, T, T>(out, MinMax<T>{is_max}, a, b); });
}
void maximum_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  min_max(a, b, out, true);
}
void minimum_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  min_max(a, b, out, false);
}

// Integer power by squaring; negative exponents give 1/x^n truncated (PyTorch's powi).
template <typename T>
struct IntPow {
  __device__ T operator()(T base, T e) const {
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
};

__device__ inline float m_pow(float x, float y) {
  return powf(x, y);
}
__device__ inline double m_pow(double x, double y) {
  return pow(x, y);
}

// Tensor exponent: pow in opmath.
template <typename T>
struct FloatPow {
  __device__ T operator()(T x, T y) const { return from_op<T>(m_pow(to_op(x), to_op(y))); }
};
// Constant exponent (b has only 0 strides, e.g. a Scalar): the CPU kernel's exact fast paths
// for 0.5, -0.5, -1, -2, 1, 2, 3; the branch is uniform across the launch.
template <typename T>
struct ScalarPow {
  __device__ T operator()(T xt, T et) const {
    using C = opmath_t<T>;
    const C x = to_op(xt), e = to_op(et);
    C r;
    if (e == C(2))
      r = x * x;
    else if (e == C(3))
      r = x * x * x;
    else if (e == C(0.5))
      r = m_sqrt_(x);
    else if (e == C(-0.5))
      r = C(1) / m_sqrt_(x);
    else if (e == C(-1))
      r = C(1) / x;
    else if (e == C(-2))
      r = C(1) / (x * x);
    else if (e == C(1))
      r = x;
    else
      r = m_pow(x, e);
    return from_op<T>(r);
  }
  __device__ static float m_sqrt_(float v) { return sqrtf(v); }
  __device__ static double m_sqrt_(double v) { return sqrt(v); }
};

bool all_strides_zero(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

void pow_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_numeric_types(out.dtype(), "pow", [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      launch_elementwise<T, T, T>(out, IntPow<T>{}, a, b);
    } else if (all_strides_zero(b)) {
      launch_elementwise<T, T, T>(out, ScalarPow<T>{}, a, b);
    } else {
      launch_elementwise<T, T, T>(out, FloatPow<T>{}, a, b);
    }
  });
}

// Comparisons, branch-free: the result is the OR of the selected outcomes among x<y, x==y, x>y
// (mask bits 1, 2, 4), inverted for ne. NaN makes all three false: only ne is true.
enum : uint8_t { kLt = 1, kEq = 2, kGt = 4, kInvert = 8 };
template <typename T>
struct Compare {
  uint8_t mask;
  __device__ bool operator()(T xt, T yt) const {
    const auto x = to_op(xt), y = to_op(yt);
    const int hit = (int(x < y) * kLt) | (int(x == y) * kEq) | (int(x > y) * kGt);
    return ((hit & mask) != 0) != ((mask & kInvert) != 0);
  }
};
template <typename T>
struct Logical {
  bool is_or;
  __device__ bool operator()(T xt, T yt) const {
    using C = opmath_t<T>;
    const bool x = to_op(xt) != C(0), y = to_op(yt) != C(0);
    return is_or ? (x || y) : (x && y);
  }
};

// Bool-valued ops: out is bool, a and b share their own dtype.
template <template <typename> class Fn, typename Arg>
void predicate(const Tensor& a, const Tensor& b, Tensor& out, const char* name, Arg arg) {
  MINIDL_CHECK(out.dtype() == kBool, "op `", name, "`: output must be bool, got ", out.dtype());
  MINIDL_CHECK(a.dtype() == b.dtype(), "op `", name, "`: internal: input dtypes differ (",
               a.dtype(), " vs ", b.dtype(), ")");
  dispatch_all(a.dtype(), name,
               [&]<typename T>() { launch_elementwise<bool, T, T>(out, Fn<T>{arg}, a, b); });
}

#define MINIDL_COMPARE(name, mask)                                    \
  void name##_kernel(const Tensor& a, const Tensor& b, Tensor& out) { \
    predicate<Compare>(a, b, out, #name, uint8_t(mask));              \
  }
MINIDL_COMPARE(eq, kEq)
MINIDL_COMPARE(ne, kEq | kInvert)
MINIDL_COMPARE(lt, kLt)
MINIDL_COMPARE(le, kLt | kEq)
MINIDL_COMPARE(gt, kGt)
MINIDL_COMPARE(ge, kGt | kEq)
#undef MINIDL_COMPARE
void logical_and_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  predicate<Logical>(a, b, out, "logical_and", false);
}
void logical_or_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  predicate<Logical>(a, b, out, "logical_or", true);
}

template <typename T>
struct Where {
  __device__ T operator()(bool c, T x, T y) const { return c ? x : y; }
};

// out = cond ? a : b; cond bool, a/b/out one dtype.
void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  MINIDL_CHECK(cond.dtype() == kBool, "op `where`: condition must be bool, got ", cond.dtype());
  dispatch_all(out.dtype(), "where", [&]<typename T>() {
    launch_elementwise<T, bool, T, T>(out, Where<T>{}, cond, a, b);
  });
}

// out = a + alpha*b for f16/bf16: the f32 product and sum of the raw ops, rounded once into out
// (bitwise what the frontend's composite gave before this op had a kernel).
void add_scaled_reduced_kernel(const Tensor& a, const Tensor& b, float alpha, Tensor& out) {
  const Tensor scaled =
      native::mul(native::to(b, kFloat32), scalar_tensor(alpha, kFloat32, b.device()));
  native::copy_(out, native::add(native::to(a, kFloat32), scaled));
}

}  // namespace

void register_binary_kernels() {
  register_kernel<Op::add>(DeviceType::cuda, add_kernel);
  register_kernel<Op::add_scaled_reduced>(DeviceType::cuda, add_scaled_reduced_kernel);
  register_kernel<Op::sub>(DeviceType::cuda, sub_kernel);
  register_kernel<Op::mul>(DeviceType::cuda, mul_kernel);
  register_kernel<Op::div>(DeviceType::cuda, div_kernel);
  register_kernel<Op::pow>(DeviceType::cuda, pow_kernel);
  register_kernel<Op::maximum>(DeviceType::cuda, maximum_kernel);
  register_kernel<Op::minimum>(DeviceType::cuda, minimum_kernel);
  register_kernel<Op::eq>(DeviceType::cuda, eq_kernel);
  register_kernel<Op::ne>(DeviceType::cuda, ne_kernel);
  register_kernel<Op::lt>(DeviceType::cuda, lt_kernel);
  register_kernel<Op::le>(DeviceType::cuda, le_kernel);
  register_kernel<Op::gt>(DeviceType::cuda, gt_kernel);
  register_kernel<Op::ge>(DeviceType::cuda, ge_kernel);
  register_kernel<Op::logical_and>(DeviceType::cuda, logical_and_kernel);
  register_kernel<Op::logical_or>(DeviceType::cuda, logical_or_kernel);
  register_kernel<Op::where>(DeviceType::cuda, where_kernel);
}

}  // namespace minidl::cuda
