// CUDA machinery shared by norm.cu (layer_norm) and batch_norm.cu: warp/block sums, 16-byte
// vectors, per-element access to small 1-D parameters of any floating dtype, and deterministic
// per-channel sums of x:[N,C,S] (partials [splits, C] merged in a fixed order by the caller).
#pragma once
#include <algorithm>

#include "tensor/cuda/runtime/common.cuh"

namespace minidl::cuda::norm_detail {

inline constexpr unsigned kFull = 0xffffffffu;
inline constexpr int kThreads = 256;  // threads of every block here (8 warps)

// Statistics dtype (mean, rstd, invstd): double for f64 inputs, float otherwise.
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
struct alignas(16) Vec {
  static constexpr int n = 16 / int(sizeof(T));
  T v[n];
};

template <typename A>
struct Pair {
  A a, b;
};

// Butterfly reduction: every lane gets the same, run-to-run identical, result.
template <typename A, typename Op>
__device__ inline A warp_reduce(A v, Op op) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = op(v, __shfl_xor_sync(kFull, v, d));
  return v;
}

struct AddOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

template <typename A>
__device__ inline A warp_sum(A v) {
  return warp_reduce(v, AddOp{});
}

// Reduction over a group of `group_warps` warps (1, or the whole block); every thread gets the
// result. smem: kThreads / 32 slots. Called uniformly by the group.
template <typename A, typename Op = AddOp>
__device__ inline A group_reduce(A v, int group_warps, A* smem, Op op = {}) {
  v = warp_reduce(v, op);
  if (group_warps == 1) return v;
  __syncthreads();  // earlier readers of smem are done
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  A t = smem[0];
  for (int i = 1; i < group_warps; ++i) t = op(t, smem[i]);
  return t;
}

// A 1-D tensor of any floating dtype read/written element-wise as double (like the CPU
// kernel's load_vec/store_vec): p == nullptr means undefined (load gives `dflt`).
struct Param {
  void* p = nullptr;
  int64_t stride = 0;
  DType dt = DType::f32;

  __device__ double load(int64_t i, double dflt) const {
    if (p == nullptr) return dflt;
    const int64_t k = i * stride;
    switch (dt) {
      case DType::f64:
        return static_cast<const double*>(p)[k];
      case DType::f16:
        return double(float(static_cast<const Half*>(p)[k]));
      case DType::bf16:
        return double(float(static_cast<const BFloat16*>(p)[k]));
      default:
        return double(static_cast<const float*>(p)[k]);
    }
  }
  __device__ void store(int64_t i, double v) const {
    if (p == nullptr) return;
    const int64_t k = i * stride;
    switch (dt) {
      case DType::f64:
        static_cast<double*>(p)[k] = v;
        break;
      case DType::f16:
        static_cast<Half*>(p)[k] = Half(float(v));
        break;
      case DType::bf16:
        static_cast<BFloat16*>(p)[k] = BFloat16(float(v));
        break;
      default:
        static_cast<float*>(p)[k] = float(v);
        break;
    }
  }
};

// t (undefined, or 1-D / contiguous of a floating dtype) as a Param; element i at i*stride(-1).
inline Param param_of(const Tensor& t) {
  if (!t.defined()) return {};
  MINIDL_CHECK(t.is_floating_point(), "CUDA norm: expected a floating parameter, got ", t.dtype());
  return {t.data_ptr(), t.dim() == 0 ? 0 : t.stride(-1), t.dtype()};
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Grid of row groups (warps or blocks), capped at 32 blocks per SM (grid-stride loops).
inline unsigned row_grid(int64_t R, int group_warps, int device) {
  const int64_t groups = kThreads / 32 / group_warps;
  return unsigned(
      std::max<int64_t>(1, std::min(ceil_div(R, groups), int64_t(sm_count(device)) * 32)));
}

// Block (32, 8): column c = blockIdx.x*32 + tx of x:[N, C] (S == 1), rows of split blockIdx.y.
// f(n, c, flat index) -> Pair<A>; partial[split * C + c] = the split's sum.
template <typename A, typename F>
__global__ void __launch_bounds__(kThreads)
    col_sum_kernel(F f, int64_t N, int64_t C, int64_t rows, Pair<A>* __restrict__ partial) {
  __shared__ Pair<A> sm[8][32];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * 32 + tx;
  const int64_t n0 = int64_t(blockIdx.y) * rows, n1 = min(N, n0 + rows);
  Pair<A> acc{A(0), A(0)};
  if (c < C) {
#pragma unroll 4
    for (int64_t n = n0 + ty; n < n1; n += 8) {
      const Pair<A> v = f(n, c, n * C + c);
      acc.a += v.a;
      acc.b += v.b;
    }
  }
  sm[ty][tx] = acc;
  __syncthreads();
#pragma unroll
  for (int h = 4; h > 0; h >>= 1) {
    if (ty < h) {
      sm[ty][tx].a += sm[ty + h][tx].a;
      sm[ty][tx].b += sm[ty + h][tx].b;
    }
    __syncthreads();
  }
  if (ty == 0 && c < C) partial[int64_t(blockIdx.y) * C + c] = sm[0][tx];
}

// Channel c = blockIdx.x of x:[N, C, S], flat (n, s) range [y*chunk, +chunk) of M = N*S.
template <typename A, typename F>
__global__ void __launch_bounds__(kThreads)
    plane_sum_kernel(F f, int64_t C, int64_t S, int64_t M, int64_t chunk,
                     Pair<A>* __restrict__ partial) {
  __shared__ Pair<A> sm[kThreads / 32];
  const int64_t c = blockIdx.x;
  const int64_t m0 = int64_t(blockIdx.y) * chunk, m1 = min(M, m0 + chunk);
  const int64_t step = blockDim.x, sn = step / S, ss = step % S;
  int64_t m = m0 + threadIdx.x, n = m / S, s = m % S;
  Pair<A> acc{A(0), A(0)};
  for (; m < m1; m += step) {
    const Pair<A> v = f(n, c, (n * C + c) * S + s);
    acc.a += v.a;
    acc.b += v.b;
    s += ss;
    n += sn;
    if (s >= S) s -= S, ++n;
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    acc.a += __shfl_down_sync(kFull, acc.a, d);
    acc.b += __shfl_down_sync(kFull, acc.b, d);
  }
  if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    Pair<A> t = sm[0];
    for (int i = 1; i < kThreads / 32; ++i) t.a += sm[i].a, t.b += sm[i].b;
    partial[int64_t(blockIdx.y) * C + c] = t;
  }
}

// Per-channel partial sums of f over x:[N, C, S]: returns the [splits, C] partials (A dtype
// `adt`, pairs) and sets *splits (0 when there is nothing to sum: the caller's sums are 0).
template <typename A, typename F>
Tensor channel_sums(const F& f, int64_t N, int64_t C, int64_t S, DType adt, int device,
                    int64_t* splits) {
  *splits = 0;
  const int64_t M = N * S;
  if (M == 0 || C == 0) return Tensor();
  const cudaStream_t st = compute_stream(device);
  const int64_t target = int64_t(sm_count(device)) * 8;  // 256-thread blocks that fill the GPU
  const Device dev{DeviceType::cuda, device};
  if (S == 1) {
    const int64_t cblocks = ceil_div(C, 32);
    MINIDL_CHECK(cblocks < (int64_t(1) << 31), "CUDA norm: too many channels (", C, ")");
    int64_t sp = std::clamp<int64_t>(ceil_div(target, cblocks), 1,
                                     std::min<int64_t>(ceil_div(N, 64), 65535));
    const int64_t rows = ceil_div(N, sp);
    sp = ceil_div(N, rows);
    Tensor part = empty({sp * C * 2}, adt, dev);
    col_sum_kernel<A, F><<<dim3(unsigned(cblocks), unsigned(sp)), dim3(32, 8), 0, st>>>(
        f, N, C, rows, static_cast<Pair<A>*>(part.data_ptr()));
    MINIDL_CUDA_LAUNCH_CHECK();
    *splits = sp;
    return part;
  }
  MINIDL_CHECK(C < (int64_t(1) << 31), "CUDA norm: too many channels (", C, ")");
  int64_t sp =
      std::clamp<int64_t>(ceil_div(target, C), 1, std::min<int64_t>(ceil_div(M, 4096), 65535));
  const int64_t chunk = ceil_div(M, sp);
  sp = ceil_div(M, chunk);
  Tensor part = empty({sp * C * 2}, adt, dev);
  plane_sum_kernel<A, F><<<dim3(unsigned(C), unsigned(sp)), kThreads, 0, st>>>(
      f, C, S, M, chunk, static_cast<Pair<A>*>(part.data_ptr()));
  MINIDL_CUDA_LAUNCH_CHECK();
  *splits = sp;
  return part;
}

// Sum of partial[s * C + c] over s < splits, in order, in double.
template <typename A>
__device__ inline Pair<double> merge_splits(const Pair<A>* partial, int64_t splits, int64_t C,
                                            int64_t c) {
  Pair<double> r{0.0, 0.0};
  for (int64_t s = 0; s < splits; ++s) {
    r.a += double(partial[s * C + c].a);
    r.b += double(partial[s * C + c].b);
  }
  return r;
}

// Registers batch_norm / batch_norm_backward (batch_norm.cu).
void register_batch_norm_kernels();

}  // namespace minidl::cuda::norm_detail
