// CUDA kernels: batch_norm forward (batch statistics + running-stat update, or eval with the
// running stats) and backward over x:[N,C,S], mirroring tensor/cpu/norm.cpp: two-pass per-channel
// sums (norm.cuh), per-channel finalisation in double, then y = x * scale + shift per channel.
#include "tensor/cuda/norm.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda::norm_detail {
namespace {

// x viewed as [N,C,S] contiguous (S = product of the trailing dims).
struct NCS {
  int64_t N, C, S;
};
NCS ncs_of(const Tensor& x) {
  NCS d{x.size(0), x.size(1), 1};
  for (int64_t i = 2; i < x.dim(); ++i) d.S *= x.size(i);
  return d;
}

// Per-element terms of the per-channel sums.
template <typename T>
struct SumX {  // {x, -}
  const T* x;
  __device__ Pair<opmath_t<T>> operator()(int64_t, int64_t, int64_t i) const {
    return {to_op(x[i]), opmath_t<T>(0)};
  }
};
template <typename T>
struct SumSq {  // {(x - mean)^2, x - mean}: the second sum corrects the mean (two-pass)
  const T* x;
  const opmath_t<T>* mean;
  __device__ Pair<opmath_t<T>> operator()(int64_t, int64_t c, int64_t i) const {
    const opmath_t<T> d = to_op(x[i]) - mean[c];
    return {d * d, d};
  }
};
template <typename T>
struct SumGrad {  // {g, g * (x - mean)}
  const T* g;
  const T* x;
  const opmath_t<T>* mean;
  __device__ Pair<opmath_t<T>> operator()(int64_t, int64_t c, int64_t i) const {
    const opmath_t<T> gv = to_op(g[i]);
    return {gv, gv * (to_op(x[i]) - mean[c])};
  }
};

#define MINIDL_FOR_CHANNELS(c, C)                                           \
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < (C); \
       c += int64_t(gridDim.x) * blockDim.x)

// First-pass mean[c] = sum / M as A (NaN when M == 0, like the CPU kernel).
template <typename A>
__global__ void bn_mean_finalize(const Pair<A>* __restrict__ partial, int64_t splits, int64_t C,
                                 int64_t M, A* __restrict__ ma) {
  MINIDL_FOR_CHANNELS(c, C) {
    ma[c] = A(merge_splits(partial, splits, C, c).a / double(M));
  }
}

// scale = invstd * w, shift = b - mean * invstd * w (into p[c], p[C + c]).
template <typename A>
__device__ inline void bn_scale_shift(int64_t c, int64_t C, double mean, double invstd,
                                      const Param& w, const Param& b, A* p) {
  const double wv = w.load(c, 1.0), bv = b.load(c, 0.0);
  p[c] = A(invstd * wv);
  p[C + c] = A(bv - mean * invstd * wv);
}

// Training: the corrected two-pass statistics from the sums of d = x - m0 (m0: the first-pass
// mean as A, in p[2C..3C)): mean = m0 + sum(d)/M, var = (sum(d^2) - sum(d)^2/M)/M. The first
// pass sums in A and rounds; the correction makes a constant channel's mean its value exactly
// (zero variance, x - mean = 0), as the CPU kernel's. Then invstd, save_mean / save_invstd and
// the running stats (unbiased var).
template <typename A>
__global__ void bn_train_finalize(const Pair<A>* __restrict__ partial, int64_t splits, int64_t C,
                                  int64_t M, double momentum, double eps, Param w, Param b,
                                  Param save_mean, Param save_invstd, Param rm, Param rv,
                                  A* __restrict__ p) {
  MINIDL_FOR_CHANNELS(c, C) {
    const Pair<double> s = merge_splits(partial, splits, C, c);  // {sum d^2, sum d}
    const double mean = double(p[2 * C + c]) + s.b / double(M);
    const double v = (s.a - s.b * (s.b / double(M))) / double(M);
    const double var = v < 0.0 ? 0.0 : v;  // rounding can go below 0; NaN stays NaN
    const double invstd = 1.0 / sqrt(var + eps);
    save_mean.store(c, mean);
    save_invstd.store(c, invstd);
    if (rm.p != nullptr) rm.store(c, (1 - momentum) * rm.load(c, 0.0) + momentum * mean);
    if (rv.p != nullptr) {
      const double unbias = M > 1 ? double(M) / double(M - 1) : 1.0;
      rv.store(c, (1 - momentum) * rv.load(c, 1.0) + momentum * var * unbias);
    }
    bn_scale_shift(c, C, mean, invstd, w, b, p);
  }
}

// Eval: the running stats normalise.
template <typename A>
__global__ void bn_eval_finalize(int64_t C, double eps, Param w, Param b, Param rm, Param rv,
                                 A* __restrict__ p) {
  MINIDL_FOR_CHANNELS(c, C) {
    bn_scale_shift(c, C, rm.load(c, 0.0), 1.0 / sqrt(rv.load(c, 1.0) + eps), w, b, p);
  }
}

// Backward statistics: saved batch stats (training) or the running stats (eval).
template <typename A>
__global__ void bn_bwd_prepare(int64_t C, bool training, double eps, Param sm, Param si, Param rm,
                               Param rv, double* __restrict__ md, double* __restrict__ inv,
                               A* __restrict__ ma) {
  MINIDL_FOR_CHANNELS(c, C) {
    const double mean = training ? sm.load(c, 0.0) : rm.load(c, 0.0);
    md[c] = mean;
    ma[c] = A(mean);
    inv[c] = training ? si.load(c, 1.0) : 1.0 / sqrt(rv.load(c, 1.0) + eps);
  }
}

// grad_x = k * g + a * (x - mean) + e (k, a, e into p[0..3C); mean is p[3C..4C)); grad_w, grad_b.
template <typename A>
__global__ void bn_bwd_finalize(const Pair<A>* __restrict__ partial, int64_t splits, int64_t C,
                                int64_t M, bool training, const double* __restrict__ md,
                                const double* __restrict__ inv, Param w, Param gw, Param gb,
                                A* __restrict__ p) {
  MINIDL_FOR_CHANNELS(c, C) {
    const Pair<double> s = merge_splits(partial, splits, C, c);  // {sum_g, sum_gx}
    const double invstd = inv[c], ws = w.load(c, 1.0) * invstd;
    p[c] = A(ws);
    p[C + c] = A(0);
    p[2 * C + c] = A(0);
    if (training && M > 0) {
      const double proj = s.b / double(M) * invstd * invstd;
      p[C + c] = A(-proj * ws);
      p[2 * C + c] = A(-(s.a / double(M)) * ws);
    }
    gw.store(c, s.b * invstd);
    gb.store(c, s.a);
  }
}
#undef MINIDL_FOR_CHANNELS

// out = x * p[c] + p[C + c] (forward) or p[c] * g + p[C + c] * (x - p[3C + c]) + p[2C + c]
// (backward) over x:[N,C,S]; vec: S % Vec::n == 0 and 16-byte aligned pointers.
template <typename T, bool kBwd>
__global__ void bn_apply(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ out,
                         const opmath_t<T>* __restrict__ p, int64_t C, int64_t S, int64_t numel,
                         bool vec) {
  using A = opmath_t<T>;
  using V = Vec<T>;
  auto f = [&](int64_t c, T xv, T gv) {
    if constexpr (kBwd)
      return from_op<T>(p[c] * to_op(gv) + p[C + c] * (to_op(xv) - p[3 * C + c]) + p[2 * C + c]);
    else
      return from_op<T>(to_op(xv) * p[c] + p[C + c]);
  };
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (vec) {
    for (int64_t vi = t0; vi < numel / V::n; vi += stride) {
      const int64_t c = (vi * V::n / S) % C;
      const V xv = reinterpret_cast<const V*>(x)[vi];
      const V gv = kBwd ? reinterpret_cast<const V*>(g)[vi] : V{};
      V o;
#pragma unroll
      for (int j = 0; j < V::n; ++j) o.v[j] = f(c, xv.v[j], gv.v[j]);
      reinterpret_cast<V*>(out)[vi] = o;
    }
    return;
  }
  for (int64_t i = t0; i < numel; i += stride) out[i] = f((i / S) % C, x[i], kBwd ? g[i] : T{});
}

template <typename T, bool kBwd>
void launch_apply(const T* x, const T* g, T* out, const opmath_t<T>* p, const NCS& d,
                  cudaStream_t st) {
  const int64_t numel = d.N * d.C * d.S;
  if (numel == 0) return;
  bool vec = d.S % Vec<T>::n == 0;
  for (const void* q :
       {static_cast<const void*>(x), static_cast<const void*>(g), static_cast<const void*>(out)})
    vec = vec && reinterpret_cast<uintptr_t>(q) % 16 == 0;
  bn_apply<T, kBwd><<<grid_for(vec ? numel / Vec<T>::n : numel), kBlock, 0, st>>>(x, g, out, p, d.C,
                                                                                  d.S, numel, vec);
  MINIDL_CUDA_LAUNCH_CHECK();
}

template <typename A>
const Pair<A>* pairs(const Tensor& t) {
  return t.defined() ? static_cast<const Pair<A>*>(t.data_ptr()) : nullptr;
}

void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                       Tensor& running_var, Tensor& out, Tensor& save_mean, Tensor& save_invstd,
                       bool training, double momentum, double eps) {
  const NCS d = ncs_of(x);
  const int64_t C = d.C, M = d.N * d.S;
  if (C == 0) return;
  TensorDeviceGuard guard(x);
  const int dev = x.device().index;
  const cudaStream_t st = stream_of(x);
  const unsigned cgrid = grid_for(C);
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    using A = opmath_t<T>;
    const DType adt = dtype_of<A>();
    const T* xp = static_cast<const T*>(x.data_ptr());
    Tensor pbuf = empty({3 * C}, adt, x.device());  // scale, shift, mean (as A)
    A* p = static_cast<A*>(pbuf.data_ptr());
    if (training) {
      int64_t sp = 0;
      Tensor part = channel_sums<A>(SumX<T>{xp}, d.N, C, d.S, adt, dev, &sp);
      bn_mean_finalize<A><<<cgrid, kBlock, 0, st>>>(pairs<A>(part), sp, C, M, p + 2 * C);
      MINIDL_CUDA_LAUNCH_CHECK();
      part = channel_sums<A>(SumSq<T>{xp, p + 2 * C}, d.N, C, d.S, adt, dev, &sp);
      bn_train_finalize<A><<<cgrid, kBlock, 0, st>>>(
          pairs<A>(part), sp, C, M, momentum, eps, param_of(w), param_of(b), param_of(save_mean),
          param_of(save_invstd), param_of(running_mean), param_of(running_var), p);
    } else {
      bn_eval_finalize<A><<<cgrid, kBlock, 0, st>>>(
          C, eps, param_of(w), param_of(b), param_of(running_mean), param_of(running_var), p);
    }
    MINIDL_CUDA_LAUNCH_CHECK();
    launch_apply<T, false>(xp, nullptr, static_cast<T*>(out.data_ptr()), p, d, st);
  });
}

void batch_norm_backward_kernel(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& save_mean, const Tensor& save_invstd, Tensor& grad_x,
                                Tensor& grad_w, Tensor& grad_b, bool training, double eps) {
  const NCS d = ncs_of(x);
  const int64_t C = d.C, M = d.N * d.S;
  if (C == 0) return;
  TensorDeviceGuard guard(x);
  const int dev = x.device().index;
  const cudaStream_t st = stream_of(x);
  const unsigned cgrid = grid_for(C);
  dispatch_floating(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    const DType adt = dtype_of<A>();
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    Tensor pbuf = empty({4 * C}, adt, x.device());       // k, a, e, mean (as A)
    Tensor dbuf = empty({2 * C}, kFloat64, x.device());  // mean, invstd
    A* p = static_cast<A*>(pbuf.data_ptr());
    double* md = static_cast<double*>(dbuf.data_ptr());
    bn_bwd_prepare<A><<<cgrid, kBlock, 0, st>>>(C, training, eps, param_of(save_mean),
                                                param_of(save_invstd), param_of(running_mean),
                                                param_of(running_var), md, md + C, p + 3 * C);
    MINIDL_CUDA_LAUNCH_CHECK();
    int64_t sp = 0;
    const Tensor part = channel_sums<A>(SumGrad<T>{gp, xp, p + 3 * C}, d.N, C, d.S, adt, dev, &sp);
    bn_bwd_finalize<A><<<cgrid, kBlock, 0, st>>>(pairs<A>(part), sp, C, M, training, md, md + C,
                                                 param_of(w), param_of(grad_w), param_of(grad_b),
                                                 p);
    MINIDL_CUDA_LAUNCH_CHECK();
    if (grad_x.defined())
      launch_apply<T, true>(xp, gp, static_cast<T*>(grad_x.data_ptr()), p, d, st);
  });
}

}  // namespace

void register_batch_norm_kernels() {
  register_kernel<Op::batch_norm>(DeviceType::cuda, batch_norm_kernel);
  register_kernel<Op::batch_norm_backward>(DeviceType::cuda, batch_norm_backward_kernel);
}

}  // namespace minidl::cuda::norm_detail
