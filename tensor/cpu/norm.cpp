// CPU kernels: batch_norm forward and backward (layer_norm's are layer_norm.cpp). Statistics
// accumulate in double (8 independent lanes so the loops vectorise); f16/bf16 compute in float.
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/norm_common.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cpu {
namespace {

using namespace norm_detail;

// ---------------------------------------------------------------- batch_norm
// x viewed as [N,C,S] contiguous (S = product of the trailing dims).
struct NCS {
  int64_t N, C, S;
};
NCS ncs_of(const Tensor& x) {
  NCS d{x.size(0), x.size(1), 1};
  for (int64_t i = 2; i < x.dim(); ++i) d.S *= x.size(i);
  return d;
}

// out[c] = sum over n, s of f(c, flat index of (n, c, s)); deterministic for any thread count.
template <typename F>
std::vector<double> channel_sum(const NCS& d, F&& f) {
  const int64_t N = d.N, C = d.C, S = d.S;  // clang 14: no binding captures
  std::vector<double> out(size_t(C), 0.0);
  if (N == 0 || C == 0 || S == 0) return out;
  if (S == 1) {  // [N,C]: row chunks with [C] partials, inner loop over contiguous channels
    const int64_t rows_per_chunk = rows_grain(C);
    const int64_t nchunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    std::vector<double> part(size_t(nchunks * C), 0.0);
    parallel_for(nchunks, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        double* p = part.data() + k * C;
        const int64_t nend = std::min(N, (k + 1) * rows_per_chunk);
        for (int64_t n = k * rows_per_chunk; n < nend; ++n)
          for (int64_t c = 0; c < C; ++c) p[c] += f(c, n * C + c);
      }
    });
    for (int64_t k = 0; k < nchunks; ++k)
      for (int64_t c = 0; c < C; ++c) out[c] += part[k * C + c];
  } else {  // planes: one channel per task, contiguous inner loop over S
    parallel_for(C, rows_grain(N * S), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double acc = 0;
        for (int64_t n = 0; n < N; ++n) {
          const int64_t base = (n * C + c) * S;
          acc += lane_sum(S, [&](int64_t s) { return f(c, base + s); });
        }
        out[c] = acc;
      }
    });
  }
  return out;
}

// Runs f(c, flat index) over every element: planes in parallel, or rows of [N,C] (S == 1)
// with a contiguous inner loop over channels.
template <typename F>
void for_each_nc(const NCS& d, F&& f) {
  const int64_t N = d.N, C = d.C, S = d.S;  // clang 14: no binding captures
  if (S == 1) {
    parallel_for(N, rows_grain(C), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t c = 0; c < C; ++c) f(c, n * C + c);
    });
    return;
  }
  parallel_for(N * C, rows_grain(S), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % C, base = p * S;
      for (int64_t s = 0; s < S; ++s) f(c, base + s);
    }
  });
}

void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                       Tensor& running_var, Tensor& out, Tensor& save_mean, Tensor& save_invstd,
                       bool training, double momentum, double eps) {
  const NCS d = ncs_of(x);
  const int64_t C = d.C, M = d.N * d.S;
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    const T* xp = x.data_ptr<T>();
    T* op = out.data_ptr<T>();
    std::vector<double> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C));
    if (training) {
      mean = channel_sum(d, [&](int64_t, int64_t i) { return double(A(xp[i])); });
      for (double& m : mean) m /= double(M);
      if constexpr (std::is_same_v<A, double>) {
        // f64 sums round: add the mean of the residuals (corrected two-pass), so a constant
        // channel gets its value as the mean, zero variance and x - mean = 0 exactly (for f32
        // and narrower inputs the double sum of a constant channel is exact already).
        const std::vector<double> r =
            channel_sum(d, [&](int64_t c, int64_t i) { return double(xp[i]) - mean[c]; });
        for (int64_t c = 0; c < C; ++c) mean[c] += r[c] / double(M);
      }
      std::vector<double> var = channel_sum(d, [&](int64_t c, int64_t i) {
        const double v = double(A(xp[i])) - mean[c];
        return v * v;
      });
      for (double& v : var) v /= double(M);
      for (int64_t c = 0; c < C; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
      store_vec(save_mean, mean);
      store_vec(save_invstd, invstd);
      if (running_mean.defined()) {
        std::vector<double> rm = load_vec<double>(running_mean, C, 0.0);
        for (int64_t c = 0; c < C; ++c) rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
        store_vec(running_mean, rm);
      }
      if (running_var.defined()) {
        std::vector<double> rv = load_vec<double>(running_var, C, 1.0);
        const double unbias = M > 1 ? double(M) / double(M - 1) : 1.0;
        for (int64_t c = 0; c < C; ++c) rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * unbias;
        store_vec(running_var, rv);
      }
    } else {
      mean = load_vec<double>(running_mean, C, 0.0);
      std::vector<double> rv = load_vec<double>(running_var, C, 1.0);
      for (int64_t c = 0; c < C; ++c) invstd[c] = 1.0 / std::sqrt(rv[c] + eps);
    }
    // y = x * scale + shift
    const std::vector<double> wv = load_vec<double>(w, C, 1.0), bv = load_vec<double>(b, C, 0.0);
    std::vector<A> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      scale[c] = A(invstd[c] * wv[c]);
      shift[c] = A(bv[c] - mean[c] * invstd[c] * wv[c]);
    }
    for_each_nc(d, [&](int64_t c, int64_t i) { op[i] = T(A(xp[i]) * scale[c] + shift[c]); });
  });
}

void batch_norm_backward_kernel(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& save_mean, const Tensor& save_invstd, Tensor& grad_x,
                                Tensor& grad_w, Tensor& grad_b, bool training, double eps) {
  const NCS d = ncs_of(x);
  const int64_t C = d.C, M = d.N * d.S;
  dispatch_floating(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    const T* xp = x.data_ptr<T>();
    const T* gp = grad_out.data_ptr<T>();
    T* gxp = grad_x.data_ptr<T>();
    std::vector<double> mean, invstd;
    if (training) {
      mean = load_vec<double>(save_mean, C, 0.0);
      invstd = load_vec<double>(save_invstd, C, 1.0);
    } else {
      mean = load_vec<double>(running_mean, C, 0.0);
      invstd = load_vec<double>(running_var, C, 1.0);
      for (double& v : invstd) v = 1.0 / std::sqrt(v + eps);
    }
    const std::vector<double> wv = load_vec<double>(w, C, 1.0);
    const std::vector<double> sum_g =
        channel_sum(d, [&](int64_t, int64_t i) { return double(A(gp[i])); });
    const std::vector<double> sum_gx = channel_sum(
        d, [&](int64_t c, int64_t i) { return double(A(gp[i])) * (double(A(xp[i])) - mean[c]); });
    // grad_x = k * g + a * (x - mean) + e  per channel
    std::vector<A> k(static_cast<size_t>(C)), a(static_cast<size_t>(C)), e(static_cast<size_t>(C)),
        mc(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const double ws = wv[c] * invstd[c];
      mc[c] = A(mean[c]);
      if (training && M > 0) {
        const double proj = sum_gx[c] / double(M) * invstd[c] * invstd[c];
        const double mg = sum_g[c] / double(M);
        k[c] = A(ws);
        a[c] = A(-proj * ws);
        e[c] = A(-mg * ws);
      } else {
        k[c] = A(ws);
        a[c] = A(0);
        e[c] = A(0);
      }
    }
    for_each_nc(d, [&](int64_t c, int64_t i) {
      gxp[i] = T(k[c] * A(gp[i]) + a[c] * (A(xp[i]) - mc[c]) + e[c]);
    });
    if (grad_w.defined()) {
      std::vector<double> gw(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) gw[c] = sum_gx[c] * invstd[c];
      store_vec(grad_w, gw);
    }
    if (grad_b.defined()) store_vec(grad_b, sum_g);
  });
}

}  // namespace

void register_norm_kernels() {
  norm_detail::register_layer_norm_kernels();
  register_kernel<Op::batch_norm>(DeviceType::cpu, batch_norm_kernel);
  register_kernel<Op::batch_norm_backward>(DeviceType::cpu, batch_norm_backward_kernel);
}

}  // namespace minidl::cpu
