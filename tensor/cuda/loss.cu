// CUDA kernels: cross_entropy forward (per-sample loss + logsumexp, log-softmax fused) and
// backward (grad_loss * (softmax - smoothed one-hot)), mirroring tensor/cpu/loss.cpp. A warp
// (C <= 1024) or a block per row. A target outside [0, C) that is not ignore_index cannot throw
// from the device without a sync: that sample's loss (forward) / gradient row (backward) is NaN.
#include <limits>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/norm.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

using namespace norm_detail;

inline constexpr int64_t kWarpRow = 1024;  // longest row given to one warp

struct MaxOp {  // NaN-ignoring max (a NaN still poisons the exp sum)
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a > b || b != b ? a : b;
  }
};

template <typename A>
__device__ inline A nan_of() {
  return std::numeric_limits<A>::quiet_NaN();
}

// logits:[M,C] contiguous, target:[M] -> loss:[M] (T), lse:[M] (stat_t<T>).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_fwd(const T* __restrict__ x, const int64_t* __restrict__ target, T* __restrict__ loss,
           stat_t<T>* __restrict__ lse, int64_t M, int64_t C, int64_t ignore_index, double ls,
           int group_warps) {
  using A = opmath_t<T>;
  __shared__ A smem[kThreads / 32];
  const int nth = 32 * group_warps, groups = blockDim.x / nth, lane = threadIdx.x % nth;
  for (int64_t r = blockIdx.x * groups + threadIdx.x / nth; r < M;
       r += int64_t(gridDim.x) * groups) {
    const T* row = x + r * C;
    A mx = -std::numeric_limits<A>::infinity(), sum = A(0);
    for (int64_t j = lane; j < C; j += nth) {
      const A v = to_op(row[j]);
      mx = MaxOp{}(mx, v);
      sum += v;
    }
    mx = group_reduce(mx, group_warps, smem, MaxOp{});
    if (ls > 0) sum = group_reduce(sum, group_warps, smem);
    const A shift = isfinite(mx) ? mx : A(0);  // all -inf rows give -inf, NaN stays NaN
    A se = A(0);
    for (int64_t j = lane; j < C; j += nth) se += exp(to_op(row[j]) - shift);
    const A l = shift + log(group_reduce(se, group_warps, smem));
    if (lane != 0) continue;
    lse[r] = stat_t<T>(l);
    const int64_t t = target[r];
    if (t == ignore_index) {
      loss[r] = from_op<T>(A(0));
      continue;
    }
    if (t < 0 || t >= C) {  // the CPU kernel throws here
      loss[r] = from_op<T>(nan_of<A>());
      continue;
    }
    A v = l - to_op(row[t]);
    if (ls > 0) v = A(1 - ls) * v + A(ls) * (l - sum / A(C));
    loss[r] = from_op<T>(v);
  }
}

// grad_logits[r, j] = g[r] * (exp(x - lse) - ls / C), minus g[r] * (1 - ls) at the target.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_bwd(const T* __restrict__ gl, int64_t gs, const T* __restrict__ x,
           const int64_t* __restrict__ target, const stat_t<T>* __restrict__ lse,
           T* __restrict__ out, int64_t M, int64_t C, int64_t ignore_index, double ls,
           int group_warps) {
  using A = opmath_t<T>;
  const int nth = 32 * group_warps, groups = blockDim.x / nth, lane = threadIdx.x % nth;
  const A off = A(ls / double(C)), on = A(1 - ls);
  for (int64_t r = blockIdx.x * groups + threadIdx.x / nth; r < M;
       r += int64_t(gridDim.x) * groups) {
    const T* row = x + r * C;
    T* orow = out + r * C;
    const int64_t t = target[r];
    if (t == ignore_index) {
      for (int64_t j = lane; j < C; j += nth) orow[j] = from_op<T>(A(0));
      continue;
    }
    if (t < 0 || t >= C) {  // the CPU kernel throws here
      for (int64_t j = lane; j < C; j += nth) orow[j] = from_op<T>(nan_of<A>());
      continue;
    }
    const A g = to_op(gl[r * gs]), l = A(lse[r]);
    for (int64_t j = lane; j < C; j += nth) {
      A v = g * (exp(to_op(row[j]) - l) - off);
      if (j == t) v -= g * on;
      orow[j] = from_op<T>(v);
    }
  }
}

inline int ce_group_warps(int64_t C) {
  return C <= kWarpRow ? 1 : kThreads / 32;
}

void cross_entropy_kernel(const Tensor& logits, const Tensor& target, Tensor& loss, Tensor& lse,
                          const CrossEntropyParams& p) {
  const int64_t M = logits.size(0), C = logits.size(1);
  if (M == 0) return;
  TensorDeviceGuard guard(logits);
  const int gw = ce_group_warps(C);
  const unsigned grid = row_grid(M, gw, logits.device().index);
  const cudaStream_t st = stream_of(logits);
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<typename T>() {
    ce_fwd<T><<<grid, kThreads, 0, st>>>(
        static_cast<const T*>(logits.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        static_cast<T*>(loss.data_ptr()), static_cast<stat_t<T>*>(lse.data_ptr()), M, C,
        p.ignore_index, p.label_smoothing, gw);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

// grad_loss:[M] (logits dtype, any stride) -> grad_logits:[M,C] contiguous
void cross_entropy_backward_kernel(const Tensor& grad_loss, const Tensor& logits,
                                   const Tensor& target, const Tensor& lse, Tensor& grad_logits,
                                   const CrossEntropyParams& p) {
  const int64_t M = logits.size(0), C = logits.size(1);
  if (M == 0 || C == 0) return;
  TensorDeviceGuard guard(logits);
  const int gw = ce_group_warps(C);
  const unsigned grid = row_grid(M, gw, logits.device().index);
  const cudaStream_t st = stream_of(logits);
  const int64_t gs = grad_loss.dim() == 0 ? 0 : grad_loss.stride(0);
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    ce_bwd<T><<<grid, kThreads, 0, st>>>(
        static_cast<const T*>(grad_loss.data_ptr()), gs, static_cast<const T*>(logits.data_ptr()),
        static_cast<const int64_t*>(target.data_ptr()),
        static_cast<const stat_t<T>*>(lse.data_ptr()), static_cast<T*>(grad_logits.data_ptr()), M,
        C, p.ignore_index, p.label_smoothing, gw);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void register_loss_kernels() {
  register_kernel<Op::cross_entropy>(DeviceType::cuda, cross_entropy_kernel);
  register_kernel<Op::cross_entropy_backward>(DeviceType::cuda, cross_entropy_backward_kernel);
}

}  // namespace minidl::cuda
