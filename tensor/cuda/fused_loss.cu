// CUDA kernels of the fused classifier loss (llm.c's fused_classifier), mirroring
// tensor/cpu/fused_loss.cpp: n_valid counted by one block, then one block per row reads the
// first V logits once (online max and exp-sum, 16-byte loads where the rows are aligned) and a
// second pass overwrites the row with (softmax - onehot) / n_valid (0 in columns V..Vp); one block
// sums the row losses in a fixed order (the same bits every run). A target outside [0, V) that is
// not ignore_index cannot throw from the device without a sync: its loss and gradient are NaN.
#include <limits>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/norm.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

using norm_detail::stat_t;
using norm_detail::Vec;
using norm_detail::warp_sum;

inline constexpr int kRowThreads = 512;      // threads of a row block
inline constexpr int kReduceThreads = 1024;  // the count and final-sum blocks

// Sum over the block (every thread gets it); smem: blockDim.x / 32 slots.
template <typename A>
__device__ A block_sum(A v, A* smem) {
  v = warp_sum(v);
  __syncthreads();  // earlier readers of smem are done
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  A t = smem[0];
  for (int i = 1; i < int(blockDim.x >> 5); ++i) t += smem[i];
  return t;
}

// Online softmax state of a set of values: m = their max, s = sum exp(v - m). A value equal to
// the max counts exp(0) = 1 without the subtraction, so +inf logits give s >= 1 and lse = +inf
// (as on the CPU), not exp(inf - inf) = NaN.
template <typename A>
struct MaxSum {
  A m, s;
};
template <typename A>
__device__ inline A exp_from(A v, A m) {  // exp(v - m), 1 when v == m
  return v == m ? A(1) : exp(v - m);
}
template <typename A>
__device__ inline void online_add(MaxSum<A>& a, A v) {
  if (v > a.m) {
    a.s = a.s * exp(a.m - v) + A(1);
    a.m = v;
  } else if (!(v == -std::numeric_limits<A>::infinity())) {  // NaN poisons s
    a.s += exp_from(v, a.m);
  }
}
template <typename A>
__device__ inline MaxSum<A> combine(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  if (m == -std::numeric_limits<A>::infinity()) return {m, a.s + b.s};  // both empty
  return {m, a.s * exp_from(a.m, m) + b.s * exp_from(b.m, m)};
}
template <typename A>
__device__ MaxSum<A> block_max_sum(MaxSum<A> v, MaxSum<A>* smem) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1)
    v = combine(v, MaxSum<A>{__shfl_xor_sync(norm_detail::kFull, v.m, d),
                             __shfl_xor_sync(norm_detail::kFull, v.s, d)});
  __syncthreads();
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  MaxSum<A> t = smem[0];
  for (int i = 1; i < int(blockDim.x >> 5); ++i) t = combine(t, smem[i]);
  return t;
}

// count[0] = the number of targets != ignore_index (one block).
__global__ void __launch_bounds__(kReduceThreads)
    count_valid(const int64_t* __restrict__ target, int64_t N, int64_t ignore_index,
                int64_t* __restrict__ count) {
  __shared__ long long smem[kReduceThreads / 32];
  long long c = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) c += target[i] != ignore_index;
  c = block_sum(c, smem);
  if (threadIdx.x == 0) count[0] = c;
}

// One block per row r of x:[N,Vp]: row_loss[r] = lse(x[r,:V]) - x[r,t] (0 when ignored) and,
// with write_grad, x[r,:] = (softmax - onehot) / n_valid, 0 for j >= V and ignored rows.
// vec: rows start 16-byte aligned (x aligned, Vp * sizeof(T) % 16 == 0).
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    fused_ce_rows(T* __restrict__ x, const int64_t* __restrict__ target,
                  const int64_t* __restrict__ count, stat_t<T>* __restrict__ row_loss, int64_t N,
                  int64_t V, int64_t Vp, int64_t ignore_index, bool write_grad, bool vec) {
  using A = opmath_t<T>;
  using VT = Vec<T>;
  constexpr int W = VT::n;
  constexpr A kInf = std::numeric_limits<A>::infinity();
  __shared__ MaxSum<A> smem[kRowThreads / 32];
  const A inv_n = A(1) / A(count[0]);
  const int64_t tid = threadIdx.x, nth = blockDim.x;
  const int64_t Vv = vec ? V / W * W : 0, Vpv = vec ? Vp / W * W : 0;  // vectorised prefixes
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    T* row = x + r * Vp;
    const int64_t t = target[r];  // the same for the whole block
    if (t == ignore_index) {
      if (tid == 0) row_loss[r] = stat_t<T>(0);
      if (!write_grad) continue;
      VT z;
#pragma unroll
      for (int k = 0; k < W; ++k) z.v[k] = from_op<T>(A(0));
      for (int64_t j = tid * W; j < Vpv; j += nth * W) *reinterpret_cast<VT*>(row + j) = z;
      for (int64_t j = Vpv + tid; j < Vp; j += nth) row[j] = from_op<T>(A(0));
      continue;
    }
    const bool bad = t < 0 || t >= V;  // the CPU kernel throws
    // read before any thread of the block starts the second pass (the reduction syncs)
    const A xt = tid == 0 && !bad ? to_op(row[t]) : A(0);
    MaxSum<A> ms{-kInf, A(0)};
    for (int64_t j = tid * W; j < Vv; j += nth * W) {
      const VT v = *reinterpret_cast<const VT*>(row + j);
#pragma unroll
      for (int k = 0; k < W; ++k) online_add(ms, to_op(v.v[k]));
    }
    for (int64_t j = Vv + tid; j < V; j += nth) online_add(ms, to_op(row[j]));
    ms = block_max_sum(ms, smem);
    const A lse = ms.m + log(ms.s);  // -inf for an all -inf row (its loss is NaN, as the CPU)
    if (tid == 0)
      row_loss[r] = bad ? stat_t<T>(std::numeric_limits<A>::quiet_NaN()) : stat_t<T>(lse - xt);
    if (!write_grad) continue;
    const A nan = std::numeric_limits<A>::quiet_NaN();
    auto grad_of = [&](A v, int64_t j) -> A {
      if (j >= V) return A(0);
      if (bad) return nan;
      return (exp(v - lse) - (j == t ? A(1) : A(0))) * inv_n;
    };
    for (int64_t j = tid * W; j < Vpv; j += nth * W) {
      VT v = *reinterpret_cast<const VT*>(row + j);
#pragma unroll
      for (int k = 0; k < W; ++k) v.v[k] = from_op<T>(grad_of(to_op(v.v[k]), j + k));
      *reinterpret_cast<VT*>(row + j) = v;
    }
    for (int64_t j = Vpv + tid; j < Vp; j += nth) row[j] = from_op<T>(grad_of(to_op(row[j]), j));
  }
}

// loss = sum(row_loss) / count in a fixed order (one block; f64 accumulation).
template <typename L>
__global__ void __launch_bounds__(kReduceThreads)
    mean_of_rows(const L* __restrict__ row_loss, const int64_t* __restrict__ count, int64_t N,
                 L* __restrict__ loss) {
  __shared__ double smem[kReduceThreads / 32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += double(row_loss[i]);
  s = block_sum(s, smem);
  if (threadIdx.x == 0) loss[0] = L(s / double(count[0]));  // 0/0 = NaN: every row ignored
}

// p[i] *= *g over n elements (skipped on the device when *g == 1); vec: p 16-byte aligned.
template <typename T>
__global__ void scale_by(T* __restrict__ p, const stat_t<T>* __restrict__ g, int64_t n, bool vec) {
  using A = opmath_t<T>;
  using VT = Vec<T>;
  constexpr int W = VT::n;
  const A ga = A(*g);
  if (ga == A(1)) return;
  const int64_t nv = vec ? n / W * W : 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t i0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = i0 * W; i < nv; i += stride * W) {
    VT v = *reinterpret_cast<const VT*>(p + i);
#pragma unroll
    for (int k = 0; k < W; ++k) v.v[k] = from_op<T>(to_op(v.v[k]) * ga);
    *reinterpret_cast<VT*>(p + i) = v;
  }
  for (int64_t i = nv + i0; i < n; i += stride) p[i] = from_op<T>(to_op(p[i]) * ga);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

void fused_cross_entropy_kernel(Tensor& logits, const Tensor& target, Tensor& loss,
                                const FusedCrossEntropyParams& p) {
  const int64_t N = logits.size(0), Vp = logits.size(1), V = p.num_classes;
  TensorDeviceGuard guard(logits);
  const cudaStream_t st = stream_of(logits);
  const Device dev = logits.device();
  Tensor count = empty({1}, kInt64, dev);
  auto* cp = static_cast<int64_t*>(count.data_ptr());
  const auto* tp = static_cast<const int64_t*>(target.data_ptr());
  count_valid<<<1, kReduceThreads, 0, st>>>(tp, N, p.ignore_index, cp);
  MINIDL_CUDA_LAUNCH_CHECK();
  dispatch_floating(logits.dtype(), "fused_cross_entropy", [&]<typename T>() {
    using L = stat_t<T>;
    Tensor row_loss = empty({std::max<int64_t>(N, 1)}, loss.dtype(), dev);
    auto* rl = static_cast<L*>(row_loss.data_ptr());
    if (N > 0) {
      const bool vec = aligned16(logits.data_ptr()) && (Vp * int64_t(sizeof(T))) % 16 == 0;
      const unsigned grid = unsigned(std::min<int64_t>(N, int64_t(1) << 20));
      fused_ce_rows<T><<<grid, kRowThreads, 0, st>>>(static_cast<T*>(logits.data_ptr()), tp, cp, rl,
                                                     N, V, Vp, p.ignore_index, p.write_grad, vec);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
    mean_of_rows<L><<<1, kReduceThreads, 0, st>>>(rl, cp, N, static_cast<L*>(loss.data_ptr()));
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

void fused_cross_entropy_backward_kernel(Tensor& grad, const Tensor& grad_loss) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  TensorDeviceGuard guard(grad);
  const cudaStream_t st = stream_of(grad);
  dispatch_floating(grad.dtype(), "fused_cross_entropy_backward", [&]<typename T>() {
    const bool vec = aligned16(grad.data_ptr());
    const int64_t work = vec ? (n + Vec<T>::n - 1) / Vec<T>::n : n;
    scale_by<T><<<grid_for(work), kBlock, 0, st>>>(
        static_cast<T*>(grad.data_ptr()), static_cast<const stat_t<T>*>(grad_loss.data_ptr()), n,
        vec);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void register_fused_loss_kernels() {
  register_kernel<Op::fused_cross_entropy>(DeviceType::cuda, fused_cross_entropy_kernel);
  register_kernel<Op::fused_cross_entropy_backward>(DeviceType::cuda,
                                                    fused_cross_entropy_backward_kernel);
}

}  // namespace minidl::cuda
