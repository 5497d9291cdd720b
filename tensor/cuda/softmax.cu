// CUDA kernels: softmax, log_softmax and their backward passes along one dim, mirroring
// tensor/cpu/softmax.cpp (math in float for f16/bf16/f32, double for f64; row sums in double;
// a NaN, +inf or all -inf row gives NaN). Innermost dim: a warp (K <= 1024) or a block
// (K <= 4096) per row with the row in registers, else a block per row re-reading it; other dims:
// 8 threads per line walking the strided dim (coalesced across 32 adjacent lines).
#include <limits>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kLongBlock = 256;  // threads per row of the long-row kernel

template <typename A>
__device__ inline A nan_max(A a, A b) {
  return (b > a || b != b) ? b : a;
}

// Xor-butterfly over the warp: every lane gets the same (bitwise) result.
template <typename V, typename F>
__device__ inline V warp_all(V v, F f) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = f(v, __shfl_xor_sync(kFull, v, d));
  return v;
}
struct MaxF {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return nan_max(a, b);
  }
};
struct AddF {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};

// Combines v over the W warps of a group that is the whole block (W > 1), in a fixed order;
// smem holds W values and is free again when this returns.
template <int W, typename V, typename F>
__device__ inline V group_all(V v, F f, V* smem) {
  v = warp_all(v, f);
  if constexpr (W > 1) {
    if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
    __syncthreads();
    v = smem[0];
#pragma unroll
    for (int w = 1; w < W; ++w) v = f(v, smem[w]);
    __syncthreads();
  }
  return v;
}

// Running (max m, sum of exp(x - m)); m sticks at NaN / +inf, which (like an all -inf row)
// end in a NaN sum, as the CPU's exp(x - max) does.
template <typename A>
struct MaxSum {
  A m = -std::numeric_limits<A>::infinity();
  double s = 0;
  __device__ void step(A x) {
    constexpr A inf = std::numeric_limits<A>::infinity();
    if (m != m || m == inf) return;
    if (x != x || x == inf) {
      m = x;
    } else if (x > m) {
      s = s * double(exp(m - x)) + 1.0;
      m = x;
    } else if (x != -inf) {
      s += double(exp(x - m));
    }
  }
  __device__ void merge(const MaxSum& o) {
    constexpr A inf = std::numeric_limits<A>::infinity();
    if (o.m == -inf || m != m || m == inf) return;
    if (o.m != o.m || o.m == inf || m == -inf) {
      *this = o;
      return;
    }
    const A mm = nan_max(m, o.m);
    s = s * exp(double(m) - double(mm)) + o.s * exp(double(o.m) - double(mm));
    m = mm;
  }
  __device__ double sum() const {
    constexpr A inf = std::numeric_limits<A>::infinity();
    return (m != m || m == inf || m == -inf) ? std::numeric_limits<double>::quiet_NaN() : s;
  }
};

// The per-line constant from the line's sum s (forward: sum exp(x - m); softmax bwd: sum g*y;
// log_softmax bwd: sum g): log(s) or 1/s forward, s backward (rounded to A as on the CPU).
template <bool Bwd, typename A>
__device__ inline A line_const(double s, bool log) {
  if constexpr (!Bwd)
    return log ? A(::log(s)) : A(1.0 / s);
  else
    return A(s);
}
// Output of element x (forward: a = x; backward: a = grad_out, b = out) given the line's max m
// (forward) and constant c = line_const(sum).
template <bool Bwd, typename A>
__device__ inline A line_out(A a, A b, A m, A c, bool log) {
  if constexpr (!Bwd)
    return log ? (a - m) - c : exp(a - m) * c;
  else
    return log ? a - exp(b) * c : b * (a - c);
}
template <bool Bwd, typename A>
__device__ inline double bwd_term(A g, A y, bool log) {
  return log ? double(g) : double(g) * double(y);
}

// Rows of K contiguous elements held in registers: a group of W warps per row (W == 1: 8 rows
// per 256-thread block), thread t holds elements t, t + 32W, ... (N of them, N*32W >= K).
template <typename T, bool Bwd, int N, int W>
__global__ void __launch_bounds__(W == 1 ? 256 : 32 * W)
    reg_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t rows,
               int K, bool log) {
  using A = opmath_t<T>;
  __shared__ A smax[W];
  __shared__ double ssum[W];
  constexpr int G = 32 * W;
  const int tid = threadIdx.x % G, groups = blockDim.x / G;
  for (int64_t r = int64_t(blockIdx.x) * groups + threadIdx.x / G; r < rows;
       r += int64_t(gridDim.x) * groups) {
    const int64_t off = r * K;
    A va[N], vb[Bwd ? N : 1];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int k = j * G + tid;
      va[j] = k < K ? to_op(a[off + k]) : A(0);
      if constexpr (Bwd) vb[j] = k < K ? to_op(b[off + k]) : A(0);
    }
    A m = 0;
    double s = 0;
    if constexpr (!Bwd) {
      m = -std::numeric_limits<A>::infinity();
#pragma unroll
      for (int j = 0; j < N; ++j)
        if (j * G + tid < K) m = nan_max(m, va[j]);
      m = group_all<W>(m, MaxF{}, smax);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A e = exp(va[j] - m);
        if (j * G + tid < K) s += double(e);
        if (!log) va[j] = e;  // softmax then only scales it
      }
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j)
        if (j * G + tid < K) s += bwd_term<Bwd>(va[j], vb[j], log);
    }
    s = group_all<W>(s, AddF{}, ssum);
    const A c = line_const<Bwd, A>(s, log);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int k = j * G + tid;
      if (k >= K) continue;
      if constexpr (!Bwd)
        out[off + k] = from_op<T>(log ? (va[j] - m) - c : va[j] * c);
      else
        out[off + k] = from_op<T>(line_out<Bwd>(va[j], vb[j], m, c, log));
    }
  }
}

// Rows too long for registers: a block per row, one reduction pass (online max/sum forward)
// and one output pass.
template <typename T, bool Bwd>
__global__ void __launch_bounds__(kLongBlock)
    long_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t rows,
                int64_t K, bool log) {
  using A = opmath_t<T>;
  __shared__ MaxSum<A> sms[kLongBlock / 32];
  __shared__ double ssum[kLongBlock / 32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* pa = a + r * K;
    const T* pb = Bwd ? b + r * K : nullptr;
    A m = 0;
    double s = 0;
    if constexpr (!Bwd) {
      MaxSum<A> ms;
      for (int64_t k = threadIdx.x; k < K; k += kLongBlock) ms.step(to_op(pa[k]));
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) {
        MaxSum<A> o;
        o.m = __shfl_xor_sync(kFull, ms.m, d);
        o.s = __shfl_xor_sync(kFull, ms.s, d);
        if (threadIdx.x % 32 < (threadIdx.x ^ d) % 32) {
          ms.merge(o);
        } else {
          o.merge(ms);  // same operand order in both lanes: identical results
          ms = o;
        }
      }
      if (threadIdx.x % 32 == 0) sms[threadIdx.x / 32] = ms;
      __syncthreads();
      ms = sms[0];
#pragma unroll
      for (int w = 1; w < kLongBlock / 32; ++w) ms.merge(sms[w]);
      __syncthreads();
      m = ms.m;
      s = ms.sum();
    } else {
      for (int64_t k = threadIdx.x; k < K; k += kLongBlock)
        s += bwd_term<Bwd>(to_op(pa[k]), to_op(pb[k]), log);
      s = group_all<kLongBlock / 32>(s, AddF{}, ssum);
    }
    const A c = line_const<Bwd, A>(s, log);
    for (int64_t k = threadIdx.x; k < K; k += kLongBlock)
      out[r * K + k] =
          from_op<T>(line_out<Bwd>(to_op(pa[k]), Bwd ? to_op(pb[k]) : A(0), m, c, log));
  }
}

// dim not innermost: x:[outer, K, inner]; block (kLinesX, kSlicesY): kLinesX adjacent lines
// (o, j) (coalesced), each walked by kSlicesY threads over k = ty, ty + kSlicesY, ... whose
// partial max/sum are merged through shared memory in a fixed order.
constexpr int kLinesX = 32, kSlicesY = 8;
template <typename T, bool Bwd>
__global__ void __launch_bounds__(kLinesX* kSlicesY)
    strided_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                   int64_t outer, int64_t K, int64_t inner, bool log) {
  using A = opmath_t<T>;
  __shared__ MaxSum<A> sms[kSlicesY][kLinesX];
  __shared__ double ssum[kSlicesY][kLinesX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t lines = outer * inner;
  for (int64_t i0 = int64_t(blockIdx.x) * kLinesX; i0 < lines; i0 += int64_t(gridDim.x) * kLinesX) {
    const int64_t i = i0 + tx;
    const bool live = i < lines;  // every thread reaches the barriers
    const int64_t base = live ? (i / inner) * K * inner + i % inner : 0;
    const int64_t kend = live ? K : 0;
    A m = 0;
    double s = 0;
    if constexpr (!Bwd) {
      MaxSum<A> ms;
#pragma unroll 4
      for (int64_t k = ty; k < kend; k += kSlicesY) ms.step(to_op(a[base + k * inner]));
      sms[ty][tx] = ms;
      __syncthreads();
      ms = sms[0][tx];
#pragma unroll
      for (int y = 1; y < kSlicesY; ++y) ms.merge(sms[y][tx]);
      m = ms.m;
      s = ms.sum();
    } else {
#pragma unroll 4
      for (int64_t k = ty; k < kend; k += kSlicesY)
        s += bwd_term<Bwd>(to_op(a[base + k * inner]), to_op(b[base + k * inner]), log);
      ssum[ty][tx] = s;
      __syncthreads();
      s = ssum[0][tx];
#pragma unroll
      for (int y = 1; y < kSlicesY; ++y) s += ssum[y][tx];
    }
    __syncthreads();  // shared memory free for the next lines
    const A c = line_const<Bwd, A>(s, log);
#pragma unroll 4
    for (int64_t k = ty; k < kend; k += kSlicesY) {
      const int64_t o = base + k * inner;
      out[o] = from_op<T>(line_out<Bwd>(to_op(a[o]), Bwd ? to_op(b[o]) : A(0), m, c, log));
    }
  }
}

template <typename T, bool Bwd, int N, int W>
void launch_reg(const T* a, const T* b, T* o, int64_t rows, int64_t K, bool log, int dev,
                cudaStream_t st) {
  const int64_t groups = W == 1 ? 8 : 1;
  const int64_t cap = int64_t(sm_count(dev)) * (W == 1 ? 16 : 64);
  const unsigned grid = unsigned(std::min<int64_t>((rows + groups - 1) / groups, cap));
  reg_kernel<T, Bwd, N, W><<<grid, W == 1 ? 256 : 32 * W, 0, st>>>(a, b, o, rows, int(K), log);
  MINIDL_CUDA_LAUNCH_CHECK();
}

// out = op(a[, b]) along dim; a, b, out of out's shape.
template <bool Bwd>
void line_op(const Tensor& a_in, const Tensor& b_in, Tensor& out, int64_t dim, bool log,
             std::string_view name) {
  if (out.numel() == 0) return;
  TensorDeviceGuard guard(out);
  dispatch_floating(out.dtype(), name, [&]<typename T>() {
    const Tensor a = native::contiguous(a_in);
    const Tensor b = Bwd ? native::contiguous(b_in) : Tensor();
    Tensor o = out.is_contiguous() ? out : empty(out.shape(), out.dtype(), out.device());
    const T* pa = ptr<T>(a);
    const T* pb = Bwd ? ptr<T>(b) : nullptr;
    T* po = ptr<T>(o);
    const int dev = out.device().index;
    const cudaStream_t st = stream_of(out);
    const int64_t K = out.size(dim);
    int64_t inner = 1;
    for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
    const int64_t rows = out.numel() / (K * inner);
    if (inner > 1) {
      const int64_t blocks =
          std::min<int64_t>((rows * inner + kLinesX - 1) / kLinesX, int64_t(sm_count(dev)) * 64);
      strided_kernel<T, Bwd>
          <<<unsigned(blocks), dim3(kLinesX, kSlicesY), 0, st>>>(pa, pb, po, rows, K, inner, log);
      MINIDL_CUDA_LAUNCH_CHECK();
    } else if (K <= 128) {
      launch_reg<T, Bwd, 4, 1>(pa, pb, po, rows, K, log, dev, st);
    } else if (K <= 256) {
      launch_reg<T, Bwd, 8, 1>(pa, pb, po, rows, K, log, dev, st);
    } else if (K <= 512) {
      launch_reg<T, Bwd, 16, 1>(pa, pb, po, rows, K, log, dev, st);
    } else if (K <= 1024) {
      launch_reg<T, Bwd, 32, 1>(pa, pb, po, rows, K, log, dev, st);
    } else if (K <= 2048) {
      launch_reg<T, Bwd, 8, 8>(pa, pb, po, rows, K, log, dev, st);
    } else if (K <= 4096) {
      launch_reg<T, Bwd, 16, 8>(pa, pb, po, rows, K, log, dev, st);
    } else {
      const unsigned grid = unsigned(std::min<int64_t>(rows, int64_t(sm_count(dev)) * 64));
      long_kernel<T, Bwd><<<grid, kLongBlock, 0, st>>>(pa, pb, po, rows, K, log);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
    if (o.data_ptr() != out.data_ptr()) native::copy_(out, o);
  });
}

void softmax_kernel(const Tensor& in, Tensor& out, int64_t dim) {
  line_op<false>(in, Tensor(), out, dim, false, "softmax");
}
void log_softmax_kernel(const Tensor& in, Tensor& out, int64_t dim) {
  line_op<false>(in, Tensor(), out, dim, true, "log_softmax");
}
void softmax_backward_kernel(const Tensor& grad_out, const Tensor& out, Tensor& grad_in,
                             int64_t dim) {
  line_op<true>(grad_out, out, grad_in, dim, false, "softmax_backward");
}
void log_softmax_backward_kernel(const Tensor& grad_out, const Tensor& out, Tensor& grad_in,
                                 int64_t dim) {
  line_op<true>(grad_out, out, grad_in, dim, true, "log_softmax_backward");
}

}  // namespace

void register_softmax_kernels() {
  register_kernel<Op::softmax>(DeviceType::cuda, softmax_kernel);
  register_kernel<Op::log_softmax>(DeviceType::cuda, log_softmax_kernel);
  register_kernel<Op::softmax_backward>(DeviceType::cuda, softmax_backward_kernel);
  register_kernel<Op::log_softmax_backward>(DeviceType::cuda, log_softmax_backward_kernel);
}

}  // namespace minidl::cuda
