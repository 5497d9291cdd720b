// CUDA kernels: sum, mean, amax, amin, logsumexp and var over sorted unique dims (out keeps
// rank), mirroring tensor/cpu/reduce.cpp: floats accumulate in double (f16/bf16 read as stored),
// integers and bool sum in int64, max/min propagate NaN. Machinery in reduce.cuh.
#include <cmath>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/reduce.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

using namespace reduce_detail;

// Type sum/mean accumulate and write in: double -> T for floats, int64 for integers and bool.
template <typename T>
using SumAcc = std::conditional_t<is_float_v<T>, double, int64_t>;
template <typename T>
using SumOut = std::conditional_t<is_float_v<T>, T, int64_t>;

// sum, or mean when `mean` (K == 0 gives 0 / NaN).
template <typename T>
struct SumR {
  using Acc = SumAcc<T>;
  using State = Acc;
  SumOut<T>* out;
  bool mean;
  __device__ Acc init() const { return Acc(0); }
  __device__ Acc step(Acc a, T v, int64_t) const { return a + Acc(to_op(v)); }
  __device__ State state(Acc a) const { return a; }
  __device__ State merge(State a, State b) const { return a + b; }
  __device__ void write(int64_t o, State s, int64_t K) const {
    if constexpr (is_float_v<T>)
      out[o] = from_op<T>(mean ? s / double(K) : s);
    else
      out[o] = s;
  }
};

// amax (is_max) / amin; a NaN wins.
template <typename T>
struct ExtR {
  using Acc = ExtV<T>;
  using State = Acc;
  T* out;
  Acc init_v;
  bool is_max;
  __device__ Acc init() const { return init_v; }
  __device__ Acc step(Acc a, T v, int64_t) const {
    const Acc x = Acc(to_op(v));
    return better(x, a, is_max) ? x : a;
  }
  __device__ State state(Acc a) const { return a; }
  __device__ State merge(State a, State b) const { return better(b, a, is_max) ? b : a; }
  __device__ void write(int64_t o, State s, int64_t) const { out[o] = from_op<T>(s); }
};

// logsumexp: (running max m, sum of exp(x - m)); a NaN gives NaN, +inf gives +inf, all -inf
// (or nothing) gives -inf, as the CPU merge rules.
template <typename T>
struct LseR {
  using M = opmath_t<T>;
  struct State {
    M m;
    double s;
  };
  using Acc = State;
  T* out;
  __device__ Acc init() const { return {-std::numeric_limits<M>::infinity(), 0.0}; }
  __device__ Acc step(Acc a, T v, int64_t) const {
    const M x = to_op(v);
    constexpr M inf = std::numeric_limits<M>::infinity();
    if (a.m != a.m) return a;
    if (x != x) return {x, double(x)};  // a NaN wins over +inf, as the CPU's NaN-first max
    if (a.m == inf || x == inf) return {inf, double(inf)};
    if (x == -inf) return a;
    if (a.m == -inf) return {x, 1.0};
    if (x <= a.m) return {a.m, a.s + double(exp(x - a.m))};
    return {x, a.s * double(exp(a.m - x)) + 1.0};
  }
  __device__ State state(Acc a) const { return a; }
  __device__ State merge(State a, State b) const {
    constexpr M inf = std::numeric_limits<M>::infinity();
    if (a.m == -inf) return b;
    if (b.m == -inf) return a;
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (a.m == inf || b.m == inf) return {inf, double(inf)};
    const M m = a.m > b.m ? a.m : b.m;
    return {m, a.s * exp(double(a.m) - double(m)) + b.s * exp(double(b.m) - double(m))};
  }
  __device__ void write(int64_t o, State s, int64_t) const {
    if (s.m != s.m || s.m == std::numeric_limits<M>::infinity() ||
        s.m == -std::numeric_limits<M>::infinity())
      out[o] = from_op<T>(s.m);
    else
      out[o] = from_op<T>(log(s.s) + double(s.m));
  }
};

// var: per thread shifted sums (n, shift = first value, sum d, sum d^2 with d = x - shift) in
// double; merged as (n, mean, m2) with Chan's formula. Divisor max(0, K - correction).
template <typename T>
struct VarR {
  struct Acc {
    double n, shift, s1, s2;
  };
  struct State {
    double n, mean, m2;
  };
  T* out;
  double correction;
  __device__ Acc init() const { return {0.0, 0.0, 0.0, 0.0}; }
  __device__ Acc step(Acc a, T v, int64_t) const {
    const double x = double(to_op(v));
    if (a.n == 0) a.shift = x;
    const double d = x - a.shift;
    return {a.n + 1, a.shift, a.s1 + d, fma(d, d, a.s2)};
  }
  __device__ State state(Acc a) const {
    if (a.n == 0) return {0.0, 0.0, 0.0};
    const double dm = a.s1 / a.n, m2 = a.s2 - a.s1 * dm;
    return {a.n, a.shift + dm, m2 < 0.0 ? 0.0 : m2};  // not fmax: a NaN / inf input gives NaN
  }
  __device__ State merge(State a, State b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, delta = b.mean - a.mean;
    return {n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
  }
  __device__ void write(int64_t o, State s, int64_t K) const {
    const double r = K == 0 ? std::numeric_limits<double>::quiet_NaN()
                            : s.m2 / fmax(0.0, double(K) - correction);
    out[o] = from_op<T>(r);
  }
};

// Plans the reduction of in over dims and runs make(out pointer) -> reducer on it.
template <typename T, typename O, typename Make>
void run(const Tensor& in, Tensor& out, const DimList& dims, Make make) {
  if (out.numel() == 0) return;
  TensorDeviceGuard guard(in);
  OutBuffer ob(out, dtype_of<O>());
  const Plan p = make_plan(in, dims);
  launch_reduce<T>(p, make(ob.ptr<O>()), in.device().index);
  ob.finish();
}

void sum_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  dispatch_all(in.dtype(), "sum", [&]<typename T>() {
    run<T, SumOut<T>>(in, out, dims, [](SumOut<T>* o) { return SumR<T>{o, false}; });
  });
}
void mean_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  dispatch_floating(in.dtype(), "mean", [&]<typename T>() {
    run<T, T>(in, out, dims, [](T* o) { return SumR<T>{o, true}; });
  });
}
template <bool IsMax>
void extreme_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  dispatch_all(in.dtype(), IsMax ? "amax" : "amin", [&]<typename T>() {
    run<T, T>(in, out, dims, [](T* o) { return ExtR<T>{o, ext_init<T>(IsMax), IsMax}; });
  });
}
void logsumexp_kernel(const Tensor& in, Tensor& out, const DimList& dims) {
  dispatch_floating(in.dtype(), "logsumexp", [&]<typename T>() {
    run<T, T>(in, out, dims, [](T* o) { return LseR<T>{o}; });
  });
}
void var_kernel(const Tensor& in, Tensor& out, const DimList& dims, double correction) {
  dispatch_floating(in.dtype(), "var", [&]<typename T>() {
    run<T, T>(in, out, dims, [correction](T* o) { return VarR<T>{o, correction}; });
  });
}

}  // namespace

void register_reduce_kernels() {
  register_kernel<Op::sum>(DeviceType::cuda, sum_kernel);
  register_kernel<Op::mean>(DeviceType::cuda, mean_kernel);
  register_kernel<Op::amax>(DeviceType::cuda, extreme_kernel<true>);
  register_kernel<Op::amin>(DeviceType::cuda, extreme_kernel<false>);
  register_kernel<Op::logsumexp>(DeviceType::cuda, logsumexp_kernel);
  register_kernel<Op::var>(DeviceType::cuda, var_kernel);
  reduce_detail::register_reduce_arg_kernels();
}

}  // namespace minidl::cuda
