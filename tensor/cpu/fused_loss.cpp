// CPU kernels of the fused classifier loss: per row (in parallel) the log-sum-exp of the first V
// columns, the row's loss and, in place, (softmax - onehot) / n_valid with 0 in columns V..Vp;
// the mean is summed serially in row order (the same bits on any thread count).
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"

namespace minidl::cpu {
namespace {

// Checks every target (before anything is written) and returns how many are not ignored.
int64_t count_valid_targets(const int64_t* t, int64_t N, int64_t V, int64_t ignore_index) {
  int64_t n = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t v = t[i];
    if (v == ignore_index) continue;
    MINIDL_CHECK(v >= 0 && v < V, "op `fused_cross_entropy`: target ", v, " at index ", i,
                 " is out of bounds: expected 0 <= target < ", V,
                 " (num_classes) or target == ignore_index (", ignore_index, ")");
    ++n;
  }
  return n;
}

// logits:[N,Vp] contiguous (overwritten with the gradient when p.write_grad), target:[N]
// -> loss: 0-d f32 (f64 for f64 logits)
void fused_cross_entropy_kernel(Tensor& logits, const Tensor& target, Tensor& loss,
                                const FusedCrossEntropyParams& p) {
  const int64_t N = logits.size(0), Vp = logits.size(1), V = p.num_classes;
  const int64_t* tp = target.data_ptr<int64_t>();
  const int64_t n_valid = count_valid_targets(tp, N, V, p.ignore_index);
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  dispatch_floating(logits.dtype(), "fused_cross_entropy", [&]<typename T>() {
    using A = opmath_t<T>;
    using Row = Eigen::Array<A, Eigen::Dynamic, 1>;
    T* xp = logits.data_ptr<T>();
    const A inv_n = A(1.0 / double(n_valid));  // unused when n_valid == 0 (every row ignored)
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(Vp, 1));
    parallel_for(N, grain, [&](int64_t r0, int64_t r1) {
      std::vector<A> buf(is_reduced_float_v<T> ? static_cast<size_t>(V) : 0);
      for (int64_t r = r0; r < r1; ++r) {
        T* xr = xp + r * Vp;
        const int64_t t = tp[r];
        if (t == p.ignore_index) {
          if (p.write_grad) std::fill(xr, xr + Vp, T(A(0)));
          continue;
        }
        // the first V columns as opmath values: in place (f32/f64) or converted into buf
        A* a = nullptr;
        if constexpr (is_reduced_float_v<T>) {
          for (int64_t j = 0; j < V; ++j) buf[size_t(j)] = A(xr[j]);
          a = buf.data();
        } else {
          a = xr;
        }
        Eigen::Map<Row> row(a, V);
        const A mx = row.maxCoeff();
        const A shift = std::isfinite(mx) ? mx : A(0);  // all -inf rows give -inf, NaN stays NaN
        const double lse = double(shift) + std::log(double((row - shift).exp().sum()));
        row_loss[size_t(r)] = lse - double(a[t]);
        if (!p.write_grad) continue;
        row = (row - A(lse)).exp() * inv_n;  // coefficient-wise: safe in place
        a[t] -= inv_n;
        if constexpr (is_reduced_float_v<T>)
          for (int64_t j = 0; j < V; ++j) xr[j] = T(a[j]);
        std::fill(xr + V, xr + Vp, T(A(0)));
      }
    });
  });
  double s = 0;
  for (double v : row_loss) s += v;
  const double mean = s / double(n_valid);  // 0/0 = NaN when every row is ignored, as torch
  if (loss.dtype() == kFloat64)
    *loss.data_ptr<double>() = mean;
  else
    *loss.data_ptr<float>() = float(mean);
}

// grad:[N,Vp] contiguous *= grad_loss (0-d f32; f64 for f64 grad), computed in opmath.
void fused_cross_entropy_backward_kernel(Tensor& grad, const Tensor& grad_loss) {
  const double g = grad_loss.dtype() == kFloat64 ? *grad_loss.data_ptr<double>()
                                                 : double(*grad_loss.data_ptr<float>());
  if (g == 1.0) return;  // the usual loss.backward(): nothing to scale
  dispatch_floating(grad.dtype(), "fused_cross_entropy_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    T* p = grad.data_ptr<T>();
    const A ga = A(g);
    parallel_for(grad.numel(), kParallelGrain, [&](int64_t i0, int64_t i1) {
      if constexpr (is_reduced_float_v<T>) {
        for (int64_t i = i0; i < i1; ++i) p[i] = T(A(p[i]) * ga);
      } else {
        Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>(p + i0, i1 - i0) *= ga;
      }
    });
  });
}

}  // namespace

void register_fused_loss_kernels() {
  register_kernel<Op::fused_cross_entropy>(DeviceType::cpu, fused_cross_entropy_kernel);
  register_kernel<Op::fused_cross_entropy_backward>(DeviceType::cpu,
                                                    fused_cross_entropy_backward_kernel);
}

}  // namespace minidl::cpu
