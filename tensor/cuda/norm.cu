// CUDA kernels: layer_norm forward and backward over x:[R,D] rows, mirroring tensor/cpu/norm.cpp
// (two-pass statistics, f16/bf16 computed in float). D <= 1024 on aligned rows: a warp per row
// with the row in registers; otherwise a warp or block per row re-reading it from cache.
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/norm.cuh"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

using namespace norm_detail;

inline constexpr int kMaxWarpRow = 1024;  // longest row held in a warp's registers

// w / b (or undefined) as contiguous opmath-typed data (a copy only when dtype/layout differ).
Tensor param_as(const Tensor& t, DType adt) {
  if (!t.defined()) return Tensor();
  return native::contiguous(native::to(t, adt));
}
template <typename A>
const A* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const A*>(t.data_ptr()) : nullptr;
}

// Warp per row; lane holds vectors k*32 + lane (k < NV) of the row. D % Vec::n == 0, aligned.
template <typename T, int NV>
__global__ void __launch_bounds__(kThreads)
    ln_fwd_warp(const T* __restrict__ x, const opmath_t<T>* __restrict__ w,
                const opmath_t<T>* __restrict__ b, T* __restrict__ out,
                stat_t<T>* __restrict__ mean, stat_t<T>* __restrict__ rstd, int64_t R, int64_t D,
                double eps) {
  using A = opmath_t<T>;
  using V = Vec<T>;
  const int lane = threadIdx.x & 31;
  const int64_t nvec = D / V::n, wpb = blockDim.x / 32;
  for (int64_t r = blockIdx.x * wpb + threadIdx.x / 32; r < R; r += int64_t(gridDim.x) * wpb) {
    const V* xr = reinterpret_cast<const V*>(x + r * D);
    A v[NV][V::n];
    A sum = A(0);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      const V t = vi < nvec ? xr[vi] : V{};
#pragma unroll
      for (int j = 0; j < V::n; ++j) {
        v[k][j] = vi < nvec ? to_op(t.v[j]) : A(0);
        sum += v[k][j];
      }
    }
    const A m = warp_sum(sum) / A(D);
    A sq = A(0);
#pragma unroll
    for (int k = 0; k < NV; ++k)
      if (k * 32 + lane < nvec)
#pragma unroll
        for (int j = 0; j < V::n; ++j) sq += (v[k][j] - m) * (v[k][j] - m);
    const A rs = A(1) / sqrt(warp_sum(sq) / A(D) + A(eps));
    if (lane == 0) mean[r] = stat_t<T>(m), rstd[r] = stat_t<T>(rs);
    V* orow = reinterpret_cast<V*>(out + r * D);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      if (vi >= nvec) continue;
      V o;
#pragma unroll
      for (int j = 0; j < V::n; ++j) {
        const int64_t col = vi * V::n + j;
        o.v[j] = from_op<T>((v[k][j] - m) * rs * (w ? w[col] : A(1)) + (b ? b[col] : A(0)));
      }
      orow[vi] = o;
    }
  }
}

// A warp (group_warps == 1) or the block (8) per row; three passes over the row (the later
// ones hit L1/L2). Any D, any alignment.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ln_fwd_group(const T* __restrict__ x, const opmath_t<T>* __restrict__ w,
                 const opmath_t<T>* __restrict__ b, T* __restrict__ out,
                 stat_t<T>* __restrict__ mean, stat_t<T>* __restrict__ rstd, int64_t R, int64_t D,
                 double eps, int group_warps) {
  using A = opmath_t<T>;
  __shared__ A smem[kThreads / 32];
  const int nth = 32 * group_warps, groups = blockDim.x / nth, lane = threadIdx.x % nth;
  for (int64_t r = blockIdx.x * groups + threadIdx.x / nth; r < R;
       r += int64_t(gridDim.x) * groups) {
    const T* xr = x + r * D;
    A sum = A(0);
    for (int64_t j = lane; j < D; j += nth) sum += to_op(xr[j]);
    const A m = group_reduce(sum, group_warps, smem) / A(D);
    A sq = A(0);
    for (int64_t j = lane; j < D; j += nth) sq += (to_op(xr[j]) - m) * (to_op(xr[j]) - m);
    const A rs = A(1) / sqrt(group_reduce(sq, group_warps, smem) / A(D) + A(eps));
    if (lane == 0) mean[r] = stat_t<T>(m), rstd[r] = stat_t<T>(rs);
    T* orow = out + r * D;
    for (int64_t j = lane; j < D; j += nth)
      orow[j] = from_op<T>((to_op(xr[j]) - m) * rs * (w ? w[j] : A(1)) + (b ? b[j] : A(0)));
  }
}

// Row geometry shared by forward and backward: vector count per lane (0: no register path).
template <typename T>
int warp_nv(int64_t D, std::initializer_list<const void*> ptrs) {
  constexpr int n = Vec<T>::n;
  if (D > kMaxWarpRow || D % n != 0) return 0;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  const int64_t need = ceil_div(D / n, 32);
  int nv = 1;
  while (nv < need) nv *= 2;
  return nv;
}

// Launches K<NV> for NV in {1, 2, 4, 8, 16} (up to the vectors a 1024-row needs).
template <typename T, template <typename, int> class K, typename... Args>
void launch_nv(int nv, unsigned grid, cudaStream_t st, Args... args) {
  constexpr int maxnv = kMaxWarpRow / 32 / Vec<T>::n;
  auto go = [&]<int NV>() {
    if constexpr (NV <= maxnv) K<T, NV>::launch(grid, st, args...);
  };
  switch (nv) {
    case 1:
      go.template operator()<1>();
      break;
    case 2:
      go.template operator()<2>();
      break;
    case 4:
      go.template operator()<4>();
      break;
    case 8:
      go.template operator()<8>();
      break;
    default:
      go.template operator()<16>();
      break;
  }
  MINIDL_CUDA_LAUNCH_CHECK();
}

template <typename T, int NV>
struct FwdWarp {
  template <typename... Args>
  static void launch(unsigned grid, cudaStream_t st, Args... args) {
    ln_fwd_warp<T, NV><<<grid, kThreads, 0, st>>>(args...);
  }
};

// x, out:[R,D] contiguous; mean, rstd:[R]; w, b:[D] or undefined.
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& mean,
                       Tensor& rstd, int64_t D, double eps) {
  const int64_t R = x.size(0);
  if (R == 0) return;
  TensorDeviceGuard guard(x);
  const int dev = x.device().index;
  const cudaStream_t st = stream_of(x);
  dispatch_floating(x.dtype(), "layer_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    using S = stat_t<T>;
    const DType adt = dtype_of<A>();
    const Tensor wa = param_as(w, adt), ba = param_as(b, adt);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    S* mp = static_cast<S*>(mean.data_ptr());
    S* rp = static_cast<S*>(rstd.data_ptr());
    const int nv = warp_nv<T>(D, {xp, op});
    if (nv > 0) {
      launch_nv<T, FwdWarp>(nv, row_grid(R, 1, dev), st, xp, cptr<A>(wa), cptr<A>(ba), op, mp, rp,
                            R, D, eps);
      return;
    }
    const int gw = D <= kMaxWarpRow ? 1 : kThreads / 32;
    ln_fwd_group<T><<<row_grid(R, gw, dev), kThreads, 0, st>>>(xp, cptr<A>(wa), cptr<A>(ba), op, mp,
                                                               rp, R, D, eps, gw);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

// Backward, warp per row with x and g in registers: grad_x = rstd * (gw - c1 - xh * c2),
// gw = g * w, xh = (x - mean) * rstd, c1 = mean(gw), c2 = mean(gw * xh).
template <typename T, int NV>
__global__ void __launch_bounds__(kThreads)
    ln_bwd_warp(const T* __restrict__ g, const T* __restrict__ x,
                const stat_t<T>* __restrict__ mean, const stat_t<T>* __restrict__ rstd,
                const opmath_t<T>* __restrict__ w, T* __restrict__ gx, int64_t R, int64_t D) {
  using A = opmath_t<T>;
  using V = Vec<T>;
  const int lane = threadIdx.x & 31;
  const int64_t nvec = D / V::n, wpb = blockDim.x / 32;
  for (int64_t r = blockIdx.x * wpb + threadIdx.x / 32; r < R; r += int64_t(gridDim.x) * wpb) {
    const V* xr = reinterpret_cast<const V*>(x + r * D);
    const V* gr = reinterpret_cast<const V*>(g + r * D);
    const A m = A(mean[r]), rs = A(rstd[r]);
    A xh[NV][V::n], gw[NV][V::n];
    A s1 = A(0), s2 = A(0);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      const V tx = vi < nvec ? xr[vi] : V{};
      const V tg = vi < nvec ? gr[vi] : V{};
#pragma unroll
      for (int j = 0; j < V::n; ++j) {
        const int64_t col = vi * V::n + j;
        xh[k][j] = vi < nvec ? (to_op(tx.v[j]) - m) * rs : A(0);
        gw[k][j] = vi < nvec ? to_op(tg.v[j]) * (w ? w[col] : A(1)) : A(0);
        s1 += gw[k][j];
        s2 += gw[k][j] * xh[k][j];
      }
    }
    const A c1 = warp_sum(s1) / A(D), c2 = warp_sum(s2) / A(D);
    V* orow = reinterpret_cast<V*>(gx + r * D);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t vi = k * 32 + lane;
      if (vi >= nvec) continue;
      V o;
#pragma unroll
      for (int j = 0; j < V::n; ++j) o.v[j] = from_op<T>(rs * (gw[k][j] - c1 - xh[k][j] * c2));
      orow[vi] = o;
    }
  }
}

// Backward, a warp or the block per row, any D / alignment: sums pass, then the write pass.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ln_bwd_group(const T* __restrict__ g, const T* __restrict__ x,
                 const stat_t<T>* __restrict__ mean, const stat_t<T>* __restrict__ rstd,
                 const opmath_t<T>* __restrict__ w, T* __restrict__ gx, int64_t R, int64_t D,
                 int group_warps) {
  using A = opmath_t<T>;
  __shared__ A smem[kThreads / 32];
  const int nth = 32 * group_warps, groups = blockDim.x / nth, lane = threadIdx.x % nth;
  for (int64_t r = blockIdx.x * groups + threadIdx.x / nth; r < R;
       r += int64_t(gridDim.x) * groups) {
    const T* xr = x + r * D;
    const T* gr = g + r * D;
    const A m = A(mean[r]), rs = A(rstd[r]);
    A s1 = A(0), s2 = A(0);
    for (int64_t j = lane; j < D; j += nth) {
      const A gwj = to_op(gr[j]) * (w ? w[j] : A(1));
      s1 += gwj;
      s2 += gwj * ((to_op(xr[j]) - m) * rs);
    }
    const A c1 = group_reduce(s1, group_warps, smem) / A(D);
    const A c2 = group_reduce(s2, group_warps, smem) / A(D);
    T* orow = gx + r * D;
    for (int64_t j = lane; j < D; j += nth) {
      const A gwj = to_op(gr[j]) * (w ? w[j] : A(1));
      orow[j] = from_op<T>(rs * (gwj - c1 - ((to_op(xr[j]) - m) * rs) * c2));
    }
  }
}

template <typename T, int NV>
struct BwdWarp {
  template <typename... Args>
  static void launch(unsigned grid, cudaStream_t st, Args... args) {
    ln_bwd_warp<T, NV><<<grid, kThreads, 0, st>>>(args...);
  }
};

// Column terms of grad_w / grad_b at (row r, flat i): {g * xh, g}.
template <typename T>
struct LnWbTerm {
  using A = opmath_t<T>;
  const T* g;
  const T* x;
  const stat_t<T>* mean;
  const stat_t<T>* rstd;
  __device__ Pair<A> operator()(int64_t r, int64_t, int64_t i) const {
    const A gv = to_op(g[i]);
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

// grad_out, x, grad_x:[R,D] contiguous; mean, rstd:[R]; grad_w, grad_b:[D] or undefined.
void layer_norm_backward_kernel(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd, const Tensor& w, Tensor& grad_x, Tensor& grad_w,
                                Tensor& grad_b, int64_t D) {
  const int64_t R = x.size(0);
  const bool want_wb = grad_w.defined() || grad_b.defined();
  if (D == 0) return;
  TensorDeviceGuard guard(x);
  const int dev = x.device().index;
  const cudaStream_t st = stream_of(x);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    using S = stat_t<T>;
    const DType adt = dtype_of<A>();
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const S* mp = static_cast<const S*>(mean.data_ptr());
    const S* rp = static_cast<const S*>(rstd.data_ptr());
    if (R > 0 && grad_x.defined()) {
      const Tensor wa = param_as(w, adt);
      T* gxp = static_cast<T*>(grad_x.data_ptr());
      const int nv = warp_nv<T>(D, {gp, xp, gxp});
      if (nv > 0) {
        launch_nv<T, BwdWarp>(nv, row_grid(R, 1, dev), st, gp, xp, mp, rp, cptr<A>(wa), gxp, R, D);
      } else {
        const int gw = D <= kMaxWarpRow ? 1 : kThreads / 32;
        ln_bwd_group<T>
            <<<row_grid(R, gw, dev), kThreads, 0, st>>>(gp, xp, mp, rp, cptr<A>(wa), gxp, R, D, gw);
        MINIDL_CUDA_LAUNCH_CHECK();
      }
    }
    if (!want_wb) return;
    int64_t splits = 0;
    const Tensor part = channel_sums<A>(LnWbTerm<T>{gp, xp, mp, rp}, R, D, 1, adt, dev, &splits);
    const Pair<A>* pp = part.defined() ? static_cast<const Pair<A>*>(part.data_ptr()) : nullptr;
    ln_wb_finalize<A>
        <<<grid_for(D), kBlock, 0, st>>>(pp, splits, D, param_of(grad_w), param_of(grad_b));
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void register_norm_kernels() {
  register_kernel<Op::layer_norm>(DeviceType::cuda, layer_norm_kernel);
  register_kernel<Op::layer_norm_backward>(DeviceType::cuda, layer_norm_backward_kernel);
  norm_detail::register_batch_norm_kernels();
}

}  // namespace minidl::cuda
