// CUDA kernels: layer_norm and add_layer_norm forward over x:[R,D] rows, mirroring
// tensor/cpu/layer_norm.cpp (two-pass statistics, f16/bf16 computed in float; the fused op adds
// a residual first and may write a 16-bit out). D <= 1024 on aligned rows: a warp per row with
// the row in registers; otherwise a warp or block per row re-reading it from cache.
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/layer_norm.cuh"
#include "tensor/dispatch.h"
#include "tensor/mixed_dtype.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

using namespace norm_detail;

// Warp per row; lane holds vectors k*32 + lane (k < NV) of the row. D % Vec::n == 0, aligned.
// y == nullptr: the rows of x; else s = x + y (rounded to T, stored to sum) is normalised.
template <typename T, typename Y, typename O, int NV>
__global__ void __launch_bounds__(kThreads)
    ln_fwd_warp(const T* __restrict__ x, const Y* __restrict__ y, T* __restrict__ sum,
                const opmath_t<T>* __restrict__ w, const opmath_t<T>* __restrict__ b,
                O* __restrict__ out, stat_t<T>* __restrict__ mean, stat_t<T>* __restrict__ rstd,
                int64_t R, int64_t D, double eps) {
  using A = opmath_t<T>;
  constexpr int n = Vec<T>::n;
  using VT = Pack<T, n>;
  using VY = Pack<Y, n>;
  using VO = Pack<O, n>;
  const int lane = threadIdx.x & 31;
  const int64_t nvec = D / n, wpb = blockDim.x / 32;
  for (int64_t r = blockIdx.x * wpb + threadIdx.x / 32; r < R; r += int64_t(gridDim.x) * wpb) {
    const VT* xr = reinterpret_cast<const VT*>(x + r * D);
    const VY* yr = y ? reinterpret_cast<const VY*>(y + r * D) : nullptr;
    VT* sr = y ? reinterpret_cast<VT*>(sum + r * D) : nullptr;
    A v[NV][n];
    A acc = A(0);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      VT t = vi < nvec ? xr[vi] : VT{};
      if (yr != nullptr && vi < nvec) {
        const VY u = yr[vi];
#pragma unroll
        for (int j = 0; j < n; ++j) t.v[j] = from_op<T>(to_op(t.v[j]) + A(to_op(u.v[j])));
        sr[vi] = t;
      }
#pragma unroll
      for (int j = 0; j < n; ++j) {
        v[k][j] = vi < nvec ? to_op(t.v[j]) : A(0);
        acc += v[k][j];
      }
    }
    const A m = warp_sum(acc) / A(D);
    A sq = A(0);
#pragma unroll
    for (int k = 0; k < NV; ++k)
      if (k * 32 + lane < nvec)
#pragma unroll
        for (int j = 0; j < n; ++j) sq += (v[k][j] - m) * (v[k][j] - m);
    const A rs = A(1) / sqrt(warp_sum(sq) / A(D) + A(eps));
    if (lane == 0) mean[r] = stat_t<T>(m), rstd[r] = stat_t<T>(rs);
    VO* orow = reinterpret_cast<VO*>(out + r * D);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      if (vi >= nvec) continue;
      VO o;
#pragma unroll
      for (int j = 0; j < n; ++j) {
        const int64_t col = vi * n + j;
        o.v[j] = from_op<O>((v[k][j] - m) * rs * (w ? w[col] : A(1)) + (b ? b[col] : A(0)));
      }
      orow[vi] = o;
    }
  }
}

// A warp (group_warps == 1) or the block (8) per row; three passes over the row (the later
// ones hit L1/L2; the sum, when there is one, is written first and re-read). Any D, alignment.
template <typename T, typename Y, typename O>
__global__ void __launch_bounds__(kThreads)
    ln_fwd_group(const T* __restrict__ x, const Y* __restrict__ y, T* __restrict__ sum,
                 const opmath_t<T>* __restrict__ w, const opmath_t<T>* __restrict__ b,
                 O* __restrict__ out, stat_t<T>* __restrict__ mean, stat_t<T>* __restrict__ rstd,
                 int64_t R, int64_t D, double eps, int group_warps) {
  using A = opmath_t<T>;
  __shared__ A smem[kThreads / 32];
  const int nth = 32 * group_warps, groups = blockDim.x / nth, lane = threadIdx.x % nth;
  for (int64_t r = blockIdx.x * groups + threadIdx.x / nth; r < R;
       r += int64_t(gridDim.x) * groups) {
    const T* xr = x + r * D;
    A acc = A(0);
    if (y != nullptr) {  // each thread re-reads only the sum elements it wrote itself
      const Y* yr = y + r * D;
      T* sr = sum + r * D;
      for (int64_t j = lane; j < D; j += nth) {
        const T s = from_op<T>(to_op(xr[j]) + A(to_op(yr[j])));
        sr[j] = s;
        acc += to_op(s);
      }
      xr = sr;
    } else {
      for (int64_t j = lane; j < D; j += nth) acc += to_op(xr[j]);
    }
    const A m = group_reduce(acc, group_warps, smem) / A(D);
    A sq = A(0);
    for (int64_t j = lane; j < D; j += nth) sq += (to_op(xr[j]) - m) * (to_op(xr[j]) - m);
    const A rs = A(1) / sqrt(group_reduce(sq, group_warps, smem) / A(D) + A(eps));
    if (lane == 0) mean[r] = stat_t<T>(m), rstd[r] = stat_t<T>(rs);
    O* orow = out + r * D;
    for (int64_t j = lane; j < D; j += nth)
      orow[j] = from_op<O>((to_op(xr[j]) - m) * rs * (w ? w[j] : A(1)) + (b ? b[j] : A(0)));
  }
}

// Rows of x (+ y) into out; y, sum null for layer_norm.
template <typename T, typename Y, typename O>
void launch_forward(const Tensor& x, const Y* yp, T* sp, const Tensor& w, const Tensor& b, O* op,
                    Tensor& mean, Tensor& rstd, int64_t D, double eps) {
  using A = opmath_t<T>;
  using S = stat_t<T>;
  const int64_t R = x.size(0);
  if (R == 0) return;
  TensorDeviceGuard guard(x);
  const int dev = x.device().index;
  const cudaStream_t st = stream_of(x);
  const DType adt = dtype_of<A>();
  const Tensor wa = param_as(w, adt), ba = param_as(b, adt);
  const T* xp = static_cast<const T*>(x.data_ptr());
  S* mp = static_cast<S*>(mean.data_ptr());
  S* rp = static_cast<S*>(rstd.data_ptr());
  const A* wp = cptr<A>(wa);
  const A* bp = cptr<A>(ba);
  const int nv = warp_nv<T>(D, {xp, op, yp, sp});
  if (nv > 0) {
    const unsigned grid = row_grid(R, 1, dev);
    launch_nv<T>(nv, [&]<int NV>() {
      ln_fwd_warp<T, Y, O, NV>
          <<<grid, kThreads, 0, st>>>(xp, yp, sp, wp, bp, op, mp, rp, R, D, eps);
    });
    return;
  }
  const int gw = D <= kMaxWarpRow ? 1 : kThreads / 32;
  ln_fwd_group<T, Y, O>
      <<<row_grid(R, gw, dev), kThreads, 0, st>>>(xp, yp, sp, wp, bp, op, mp, rp, R, D, eps, gw);
  MINIDL_CUDA_LAUNCH_CHECK();
}

// x, out:[R,D] contiguous; mean, rstd:[R]; w, b:[D] or undefined.
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& mean,
                       Tensor& rstd, int64_t D, double eps) {
  dispatch_floating(x.dtype(), "layer_norm", [&]<typename T>() {
    launch_forward<T, T, T>(x, nullptr, nullptr, w, b, static_cast<T*>(out.data_ptr()), mean, rstd,
                            D, eps);
  });
}

// x, y, sum, out:[R,D] contiguous (y, sum undefined: out = layer_norm(x)); mean, rstd:[R].
void add_layer_norm_kernel(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& b,
                           Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd, int64_t D,
                           double eps) {
  const DType yd = y.defined() ? y.dtype() : x.dtype();
  dispatch_float_and_twins(x.dtype(), yd, out.dtype(), "add_layer_norm", "the residual's dtype",
                           "out_dtype", [&]<typename T, typename Y, typename O>() {
                             launch_forward<T, Y, O>(
                                 x, y.defined() ? static_cast<const Y*>(y.data_ptr()) : nullptr,
                                 y.defined() ? static_cast<T*>(sum.data_ptr()) : nullptr, w, b,
                                 static_cast<O*>(out.data_ptr()), mean, rstd, D, eps);
                           });
}

}  // namespace

void register_norm_kernels() {
  register_kernel<Op::layer_norm>(DeviceType::cuda, layer_norm_kernel);
  register_kernel<Op::add_layer_norm>(DeviceType::cuda, add_layer_norm_kernel);
  norm_detail::register_layer_norm_backward_kernels();
  norm_detail::register_batch_norm_kernels();
}

}  // namespace minidl::cuda
