// CUDA kernels: layer_norm and add_layer_norm backward over s:[R,D] rows, mirroring
// tensor/cpu/layer_norm.cpp: grad_x = rstd * (gw - c1 - xh * c2) (+ the sum's own gradient),
// the residual's gradient written beside it in its dtype, grad_w/grad_b as column sums.
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/layer_norm.cuh"
#include "tensor/dispatch.h"
#include "tensor/mixed_dtype.h"
#include "tensor/ops.h"

namespace minidl::cuda::norm_detail {
namespace {

// a + b rounded once, never contracted with the product that made a into an FMA (which would
// round differently from the autograd engine's add of two gradients).
__device__ inline float add_rn(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ inline double add_rn(double a, double b) {
  return __dadd_rn(a, b);
}

// The output element of a backward row: v (rounded to T) plus the sum's gradient when there is
// one, added in T as the autograd engine adds two gradients.
template <typename T>
__device__ inline T with_grad_sum(opmath_t<T> v, const T* gs, int64_t i) {
  const T t = from_op<T>(v);
  return gs ? from_op<T>(add_rn(to_op(t), to_op(gs[i]))) : t;
}

// Warp per row with s and g in registers: gw = g * w, xh = (s - mean) * rstd, c1 = mean(gw),
// c2 = mean(gw * xh). g has dtype G (out's); gs, gy may be null.
template <typename T, typename G, typename Y, int NV>
__global__ void __launch_bounds__(kThreads)
    ln_bwd_warp(const G* __restrict__ g, const T* __restrict__ gs, const T* __restrict__ x,
                const stat_t<T>* __restrict__ mean, const stat_t<T>* __restrict__ rstd,
                const opmath_t<T>* __restrict__ w, T* __restrict__ gx, Y* __restrict__ gy,
                int64_t R, int64_t D) {
  using A = opmath_t<T>;
  constexpr int n = Vec<T>::n;
  using VT = Pack<T, n>;
  using VG = Pack<G, n>;
  using VY = Pack<Y, n>;
  const int lane = threadIdx.x & 31;
  const int64_t nvec = D / n, wpb = blockDim.x / 32;
  for (int64_t r = blockIdx.x * wpb + threadIdx.x / 32; r < R; r += int64_t(gridDim.x) * wpb) {
    const VT* xr = reinterpret_cast<const VT*>(x + r * D);
    const VG* gr = reinterpret_cast<const VG*>(g + r * D);
    const A m = A(mean[r]), rs = A(rstd[r]);
    A xh[NV][n], gw[NV][n];
    A s1 = A(0), s2 = A(0);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      const VT tx = vi < nvec ? xr[vi] : VT{};
      const VG tg = vi < nvec ? gr[vi] : VG{};
#pragma unroll
      for (int j = 0; j < n; ++j) {
        const int64_t col = vi * n + j;
        xh[k][j] = vi < nvec ? (to_op(tx.v[j]) - m) * rs : A(0);
        gw[k][j] = vi < nvec ? A(to_op(tg.v[j])) * (w ? w[col] : A(1)) : A(0);
        s1 += gw[k][j];
        s2 += gw[k][j] * xh[k][j];
      }
    }
    const A c1 = warp_sum(s1) / A(D), c2 = warp_sum(s2) / A(D);
    VT* orow = reinterpret_cast<VT*>(gx + r * D);
    VY* yrow = gy ? reinterpret_cast<VY*>(gy + r * D) : nullptr;
    const T* gsr = gs ? gs + r * D : nullptr;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      if (vi >= nvec) continue;
      VT o;
#pragma unroll
      for (int j = 0; j < n; ++j)
        o.v[j] = with_grad_sum<T>(rs * (gw[k][j] - c1 - xh[k][j] * c2), gsr, vi * n + j);
      orow[vi] = o;
      if (yrow != nullptr) {
        VY oy;
#pragma unroll
        for (int j = 0; j < n; ++j) oy.v[j] = from_op<Y>(to_op(o.v[j]));
        yrow[vi] = oy;
      }
    }
  }
}

// A warp or the block per row, any D / alignment: sums pass, then the write pass.
template <typename T, typename G, typename Y>
__global__ void __launch_bounds__(kThreads)
    ln_bwd_group(const G* __restrict__ g, const T* __restrict__ gs, const T* __restrict__ x,
                 const stat_t<T>* __restrict__ mean, const stat_t<T>* __restrict__ rstd,
                 const opmath_t<T>* __restrict__ w, T* __restrict__ gx, Y* __restrict__ gy,
                 int64_t R, int64_t D, int group_warps) {
  using A = opmath_t<T>;
  __shared__ A smem[kThreads / 32];
  const int nth = 32 * group_warps, groups = blockDim.x / nth, lane = threadIdx.x % nth;
  for (int64_t r = blockIdx.x * groups + threadIdx.x / nth; r < R;
       r += int64_t(gridDim.x) * groups) {
    const T* xr = x + r * D;
    const G* gr = g + r * D;
    const A m = A(mean[r]), rs = A(rstd[r]);
    A s1 = A(0), s2 = A(0);
    for (int64_t j = lane; j < D; j += nth) {
      const A gwj = A(to_op(gr[j])) * (w ? w[j] : A(1));
      s1 += gwj;
      s2 += gwj * ((to_op(xr[j]) - m) * rs);
    }
    const A c1 = group_reduce(s1, group_warps, smem) / A(D);
    const A c2 = group_reduce(s2, group_warps, smem) / A(D);
    T* orow = gx + r * D;
    const T* gsr = gs ? gs + r * D : nullptr;
    for (int64_t j = lane; j < D; j += nth) {
      const A gwj = A(to_op(gr[j])) * (w ? w[j] : A(1));
      const T v = with_grad_sum<T>(rs * (gwj - c1 - ((to_op(xr[j]) - m) * rs) * c2), gsr, j);
      orow[j] = v;
      if (gy) gy[r * D + j] = from_op<Y>(to_op(v));
    }
  }
}

// Column terms of grad_w / grad_b at (row r, flat i): {g * xh, g}.
template <typename T, typename G>
struct LnWbTerm {
  using A = opmath_t<T>;
  const G* g;
  const T* x;
  const stat_t<T>* mean;
  const stat_t<T>* rstd;
  __device__ Pair<A> operator()(int64_t r, int64_t, int64_t i) const {
    const A gv = A(to_op(g[i]));
    return {gv * ((to_op(x[i]) - A(mean[r])) * A(rstd[r])), gv};
  }
};

// grad_w[j], grad_b[j] (either may be undefined) = the merged column partials (0 when R == 0).
template <typename A>
__global__ void ln_wb_finalize(const Pair<A>* __restrict__ partial, int64_t splits, int64_t D,
                               Param gw, Param gb) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < D;
       j += int64_t(gridDim.x) * blockDim.x) {
    const Pair<double> s = merge_splits(partial, splits, D, j);
    gw.store(j, s.a);
    gb.store(j, s.b);
  }
}

// g:[R,D] (dtype G), gs, x, gx:[R,D] (T; gs may be undefined), gy:[R,D] (Y) or undefined.
template <typename T, typename G, typename Y>
void launch_backward(const Tensor& grad_out, const Tensor& grad_sum, const Tensor& x,
                     const Tensor& mean, const Tensor& rstd, const Tensor& w, Tensor& grad_x,
                     Tensor& grad_y, Tensor& grad_w, Tensor& grad_b, int64_t D) {
  using A = opmath_t<T>;
  using S = stat_t<T>;
  const int64_t R = x.size(0);
  const bool want_wb = grad_w.defined() || grad_b.defined();
  if (D == 0) return;
  TensorDeviceGuard guard(x);
  const int dev = x.device().index;
  const cudaStream_t st = stream_of(x);
  const DType adt = dtype_of<A>();
  const G* gp = static_cast<const G*>(grad_out.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const S* mp = static_cast<const S*>(mean.data_ptr());
  const S* rp = static_cast<const S*>(rstd.data_ptr());
  if (R > 0 && grad_x.defined()) {
    const Tensor wa = param_as(w, adt);
    const A* wp = cptr<A>(wa);
    const T* gsp = grad_sum.defined() ? static_cast<const T*>(grad_sum.data_ptr()) : nullptr;
    T* gxp = static_cast<T*>(grad_x.data_ptr());
    Y* gyp = grad_y.defined() ? static_cast<Y*>(grad_y.data_ptr()) : nullptr;
    const int nv = warp_nv<T>(D, {gp, gsp, xp, gxp, gyp});
    if (nv > 0) {
      const unsigned grid = row_grid(R, 1, dev);
      launch_nv<T>(nv, [&]<int NV>() {
        ln_bwd_warp<T, G, Y, NV>
            <<<grid, kThreads, 0, st>>>(gp, gsp, xp, mp, rp, wp, gxp, gyp, R, D);
      });
    } else {
      const int gw = D <= kMaxWarpRow ? 1 : kThreads / 32;
      ln_bwd_group<T, G, Y>
          <<<row_grid(R, gw, dev), kThreads, 0, st>>>(gp, gsp, xp, mp, rp, wp, gxp, gyp, R, D, gw);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
  }
  if (!want_wb) return;
  int64_t splits = 0;
  const Tensor part = channel_sums<A>(LnWbTerm<T, G>{gp, xp, mp, rp}, R, D, 1, adt, dev, &splits);
  const Pair<A>* pp = part.defined() ? static_cast<const Pair<A>*>(part.data_ptr()) : nullptr;
  ln_wb_finalize<A>
      <<<grid_for(D), kBlock, 0, st>>>(pp, splits, D, param_of(grad_w), param_of(grad_b));
  MINIDL_CUDA_LAUNCH_CHECK();
}

// grad_out, x, grad_x:[R,D] contiguous; mean, rstd:[R]; grad_w, grad_b:[D] or undefined.
void layer_norm_backward_kernel(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd, const Tensor& w, Tensor& grad_x, Tensor& grad_w,
                                Tensor& grad_b, int64_t D) {
  Tensor none;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    launch_backward<T, T, T>(grad_out, none, x, mean, rstd, w, grad_x, none, grad_w, grad_b, D);
  });
}

// grad_out:[R,D] (out's dtype), grad_sum, s, grad_x:[R,D] (s's dtype), grad_y:[R,D] (its own
// dtype); grad_sum, grad_y, grad_w, grad_b may be undefined.
void add_layer_norm_backward_kernel(const Tensor& grad_out, const Tensor& grad_sum, const Tensor& s,
                                    const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                    Tensor& grad_x, Tensor& grad_y, Tensor& grad_w, Tensor& grad_b,
                                    int64_t D) {
  const DType yd = grad_y.defined() ? grad_y.dtype() : s.dtype();
  dispatch_float_and_twins(s.dtype(), grad_out.dtype(), yd, "add_layer_norm_backward",
                           "grad_out's dtype", "the residual's dtype",
                           [&]<typename T, typename G, typename Y>() {
                             launch_backward<T, G, Y>(grad_out, grad_sum, s, mean, rstd, w, grad_x,
                                                      grad_y, grad_w, grad_b, D);
                           });
}

}  // namespace

void register_layer_norm_backward_kernels() {
  register_kernel<Op::layer_norm_backward>(DeviceType::cuda, layer_norm_backward_kernel);
  register_kernel<Op::add_layer_norm_backward>(DeviceType::cuda, add_layer_norm_backward_kernel);
}

}  // namespace minidl::cuda::norm_detail
