// CPU kernels: cross_entropy forward (per-sample loss + logsumexp) and backward
// (grad_loss * (softmax - smoothed one-hot)). Rows in parallel; f16/bf16 compute in float.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"

namespace minidl::cpu {
namespace {

// lse dtype: double for f64 logits, float otherwise.
template <typename T>
using lse_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Throws naming the first target outside [0, C) that is not ignore_index (serial: cheap).
void check_targets(const int64_t* t, int64_t M, int64_t C, int64_t ignore_index) {
  for (int64_t i = 0; i < M; ++i) {
    const int64_t v = t[i];
    MINIDL_CHECK(v == ignore_index || (v >= 0 && v < C), "op `cross_entropy`: target ", v,
                 " at index ", i, " is out of bounds: expected 0 <= target < ", C,
                 " (number of classes) or target == ignore_index (", ignore_index, ")");
  }
}

inline int64_t rows_grain(int64_t C) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1));
}

// A contiguous row as an Eigen array of opmath_t<T>: mapped in place for f32/f64, converted
// into `buf` (size n) for f16/bf16.
template <typename T, typename A = opmath_t<T>>
Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>> opmath_row(const T* x, int64_t n,
                                                                std::vector<A>& buf) {
  if constexpr (is_reduced_float_v<T>) {
    for (int64_t j = 0; j < n; ++j) buf[j] = A(x[j]);
    return {buf.data(), n};
  } else {
    return {x, n};
  }
}

// logits:[M,C] contiguous, target:[M] int64 contiguous -> loss:[M] (logits dtype), lse:[M]
void cross_entropy_kernel(const Tensor& logits, const Tensor& target, Tensor& loss, Tensor& lse,
                          const CrossEntropyParams& p) {
  const int64_t M = logits.size(0), C = logits.size(1);
  const int64_t* tp = target.data_ptr<int64_t>();
  check_targets(tp, M, C, p.ignore_index);
  const double ls = p.label_smoothing;
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using A = opmath_t<T>;
    using L = lse_t<T>;
    const T* xp = logits.data_ptr<T>();
    T* lp = loss.data_ptr<T>();
    L* sp = lse.data_ptr<L>();
    parallel_for(M, rows_grain(C), [&](int64_t r0, int64_t r1) {
      std::vector<A> buf(is_reduced_float_v<T> ? static_cast<size_t>(C) : 0);
      for (int64_t r = r0; r < r1; ++r) {
        const auto row = opmath_row(xp + r * C, C, buf);  // Eigen array of A
        const A mx = C > 0 ? row.maxCoeff() : -std::numeric_limits<A>::infinity();
        const A shift = std::isfinite(mx) ? mx : A(0);  // all -inf rows give -inf, NaN stays NaN
        const double l = double(shift) + std::log(double((row - shift).exp().sum()));
        sp[r] = L(l);
        const int64_t t = tp[r];
        if (t == p.ignore_index) {
          lp[r] = T(A(0));
          continue;
        }
        double v = l - double(row[t]);
        if (ls > 0) v = (1 - ls) * v + ls * (l - double(row.sum()) / double(C));
        lp[r] = T(A(v));
      }
    });
  });
}

// grad_loss:[M] (logits dtype, any stride) -> grad_logits:[M,C] contiguous
void cross_entropy_backward_kernel(const Tensor& grad_loss, const Tensor& logits,
                                   const Tensor& target, const Tensor& lse, Tensor& grad_logits,
                                   const CrossEntropyParams& p) {
  const int64_t M = logits.size(0), C = logits.size(1);
  const int64_t* tp = target.data_ptr<int64_t>();
  check_targets(tp, M, C, p.ignore_index);
  const double ls = p.label_smoothing;
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    using L = lse_t<T>;
    const T* xp = logits.data_ptr<T>();
    const T* gp = grad_loss.data_ptr<T>();
    const int64_t gs = grad_loss.dim() == 0 ? 0 : grad_loss.stride(0);
    const L* sp = lse.data_ptr<L>();
    T* op = grad_logits.data_ptr<T>();
    const A off = A(ls / double(C)), on = A(1 - ls);
    parallel_for(M, rows_grain(C), [&](int64_t r0, int64_t r1) {
      std::vector<A> buf(is_reduced_float_v<T> ? static_cast<size_t>(C) : 0);
      std::vector<A> obuf(is_reduced_float_v<T> ? static_cast<size_t>(C) : 0);
      for (int64_t r = r0; r < r1; ++r) {
        T* orow = op + r * C;
        const int64_t t = tp[r];
        if (t == p.ignore_index) {
          for (int64_t j = 0; j < C; ++j) orow[j] = T(A(0));
          continue;
        }
        const auto row = opmath_row(xp + r * C, C, buf);
        const A g = A(gp[r * gs]);
        const A l = A(sp[r]);
        A* o = is_reduced_float_v<T> ? obuf.data() : reinterpret_cast<A*>(orow);
        Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>> out(o, C);
        out = g * ((row - l).exp() - off);
        o[t] -= g * on;
        if constexpr (is_reduced_float_v<T>)
          for (int64_t j = 0; j < C; ++j) orow[j] = T(o[j]);
      }
    });
  });
}

}  // namespace

void register_loss_kernels() {
  register_kernel<Op::cross_entropy>(DeviceType::cpu, cross_entropy_kernel);
  register_kernel<Op::cross_entropy_backward>(DeviceType::cpu, cross_entropy_backward_kernel);
}

}  // namespace minidl::cpu
