// CUDA kernels: 2-D max pooling (flat h*W+w indices per plane, NaN propagating) and average
// pooling (count_include_pad, divisor_override, ceil_mode), forward and backward, mirroring
// tensor/cpu/pool.cpp. The frontend passes contiguous [N,C,H,W] tensors; one thread per element.
#include <limits>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

// Sizes and parameters of one pooling: planes = N*C input planes [H,W] -> [Ho,Wo].
struct PoolGeom {
  int64_t planes, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t divisor_override;
  bool count_include_pad;
};

PoolGeom pool_geom(const Shape& in, const Shape& out, const Pool2dParams& p) {
  return {in[0] * in[1],
          in[2],
          in[3],
          out[2],
          out[3],
          p.kernel[0],
          p.kernel[1],
          p.stride[0],
          p.stride[1],
          p.padding[0],
          p.padding[1],
          p.dilation[0],
          p.dilation[1],
          p.divisor_override,
          p.count_include_pad};
}

// int64 min/max (minidl::min / max name the tensor reductions).
__device__ inline int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__device__ inline int64_t imax(int64_t a, int64_t b) {
  return a > b ? a : b;
}

__device__ inline int64_t global_id() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_stride() {
  return int64_t(gridDim.x) * blockDim.x;
}

// out, idx:[planes,Ho,Wo]; same window walk, initial value and NaN rule as the CPU kernel
// (the last NaN of the window wins).
template <typename T>
__global__ void max_pool_kernel(const T* __restrict__ x, T* __restrict__ out,
                                int64_t* __restrict__ idx, PoolGeom g, int64_t n) {
  using A = opmath_t<T>;
  for (int64_t i = global_id(); i < n; i += grid_stride()) {
    const int64_t ow = i % g.Wo, t = i / g.Wo, oh = t % g.Ho, pl = t / g.Ho;
    const T* src = x + pl * g.H * g.W;
    int64_t ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
    const int64_t ih1 = imin(ih0 + (g.kh - 1) * g.dh + 1, g.H);
    const int64_t iw1 = imin(iw0 + (g.kw - 1) * g.dw + 1, g.W);
    if (ih0 < 0) ih0 += (-ih0 + g.dh - 1) / g.dh * g.dh;  // first tap inside the input
    if (iw0 < 0) iw0 += (-iw0 + g.dw - 1) / g.dw * g.dw;
    A best = -std::numeric_limits<A>::infinity();
    int64_t best_i = ih0 * g.W + iw0;
    for (int64_t ih = ih0; ih < ih1; ih += g.dh) {
      for (int64_t iw = iw0; iw < iw1; iw += g.dw) {
        const A v = to_op(src[ih * g.W + iw]);
        if (v > best || v != v) {
          best = v;
          best_i = ih * g.W + iw;
        }
      }
    }
    out[i] = from_op<T>(best);
    idx[i] = best_i;
  }
}

// Windows that share no input element (and, without dilation, always hold one): every
// in-range index is hit at most once, so the gradient is written without atomics.
template <typename T>
__global__ void max_pool_bwd_direct(const T* __restrict__ gout, const int64_t* __restrict__ idx,
                                    T* __restrict__ gin, int64_t HW, int64_t L, int64_t n) {
  for (int64_t i = global_id(); i < n; i += grid_stride()) {
    const int64_t k = idx[i];
    if (k >= 0 && k < HW) gin[(i / L) * HW + k] = gout[i];
  }
}

// Overlapping windows: atomic accumulation into acc (the gradient itself for f32/f64, an f32
// buffer for f16/bf16). Out-of-range indices are skipped.
template <typename T, typename A>
__global__ void max_pool_bwd_atomic(const T* __restrict__ gout, const int64_t* __restrict__ idx,
                                    A* __restrict__ acc, int64_t HW, int64_t L, int64_t n) {
  for (int64_t i = global_id(); i < n; i += grid_stride()) {
    const int64_t k = idx[i];
    if (k >= 0 && k < HW) atomicAdd(acc + (i / L) * HW + k, A(to_op(gout[i])));
  }
}

template <typename T>
__global__ void cast_from_float(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = global_id(); i < n; i += grid_stride()) dst[i] = from_op<T>(src[i]);
}

// Window of output (oh, ow) clipped to the input, and its divisor, as PyTorch's avg_pool2d.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

__device__ inline AvgWindow avg_window(int64_t oh, int64_t ow, const PoolGeom& g) {
  int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  int64_t h1 = imin(h0 + g.kh, g.H + g.ph), w1 = imin(w0 + g.kw, g.W + g.pw);
  const int64_t pool_size = (h1 - h0) * (w1 - w0);
  h0 = imax(h0, 0);
  w0 = imax(w0, 0);
  h1 = imin(h1, g.H);
  w1 = imin(w1, g.W);
  const int64_t div = g.divisor_override    ? g.divisor_override
                      : g.count_include_pad ? pool_size
                                            : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, div};
}

template <typename T>
__global__ void avg_pool_kernel(const T* __restrict__ x, T* __restrict__ out, PoolGeom g,
                                int64_t n) {
  using A = opmath_t<T>;
  for (int64_t i = global_id(); i < n; i += grid_stride()) {
    const int64_t ow = i % g.Wo, t = i / g.Wo, oh = t % g.Ho, pl = t / g.Ho;
    const AvgWindow win = avg_window(oh, ow, g);
    if (win.h0 >= win.h1 || win.w0 >= win.w1) {
      out[i] = from_op<T>(A(0));
      continue;
    }
    const T* src = x + pl * g.H * g.W;
    A sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += to_op(src[ih * g.W + iw]);
    out[i] = from_op<T>(sum / A(win.divisor));
  }
}

// First output index whose window [o*s - p, o*s - p + k) contains input i.
__device__ inline int64_t first_window(int64_t i, int64_t k, int64_t s, int64_t p) {
  const int64_t num = i + p - k + 1;
  return num <= 0 ? 0 : (num + s - 1) / s;
}

// One thread per input element gathers grad/divisor from every window covering it, in the
// CPU kernel's (oh, ow) order: deterministic, no atomics.
template <typename T>
__global__ void avg_pool_bwd_kernel(const T* __restrict__ gout, T* __restrict__ gin, PoolGeom g,
                                    int64_t n) {
  using A = opmath_t<T>;
  for (int64_t i = global_id(); i < n; i += grid_stride()) {
    const int64_t iw = i % g.W, t = i / g.W, ih = t % g.H, pl = t / g.H;
    const T* gs = gout + pl * g.Ho * g.Wo;
    const int64_t oh0 = first_window(ih, g.kh, g.sh, g.ph);
    const int64_t oh1 = imin((ih + g.ph) / g.sh + 1, g.Ho);
    const int64_t ow0 = first_window(iw, g.kw, g.sw, g.pw);
    const int64_t ow1 = imin((iw + g.pw) / g.sw + 1, g.Wo);
    A acc = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const AvgWindow win = avg_window(oh, ow, g);
        acc += to_op(gs[oh * g.Wo + ow]) / A(win.divisor);
      }
    }
    gin[i] = from_op<T>(acc);
  }
}

void max_pool2d_kernel(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dParams& p) {
  const int64_t n = out.numel();
  if (n == 0) return;
  TensorDeviceGuard guard(x);
  const PoolGeom g = pool_geom(x.shape(), out.shape(), p);
  dispatch_floating(x.dtype(), "max_pool2d", [&]<typename T>() {
    max_pool_kernel<T><<<grid_for(n), kBlock, 0, stream_of(x)>>>(ptr<T>(x), ptr<T>(out),
                                                                 ptr<int64_t>(indices), g, n);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

void max_pool2d_backward_kernel(const Tensor& grad_out, const Tensor& indices, Tensor& grad_in,
                                const Pool2dParams& p) {
  const int64_t total = grad_in.numel(), n = grad_out.numel();
  if (total == 0 || n == 0) return;  // n = 0 only with no planes
  TensorDeviceGuard guard(grad_in);
  const PoolGeom g = pool_geom(grad_in.shape(), grad_out.shape(), p);
  const int64_t HW = g.H * g.W, L = g.Ho * g.Wo;
  const bool overlap = g.sh < (g.kh - 1) * g.dh + 1 || g.sw < (g.kw - 1) * g.dw + 1;
  const bool direct = !overlap && g.dh == 1 && g.dw == 1;
  cudaStream_t s = stream_of(grad_in);
  dispatch_floating(grad_in.dtype(), "max_pool2d_backward", [&]<typename T>() {
    using A = opmath_t<T>;
    constexpr bool same = std::is_same_v<A, T>;
    Tensor acc = same || direct ? grad_in : empty(grad_in.shape(), kFloat32, grad_in.device());
    MINIDL_CUDA_CHECK(cudaMemsetAsync(acc.data_ptr(), 0, acc.nbytes(), s));
    if (direct) {
      max_pool_bwd_direct<T><<<grid_for(n), kBlock, 0, s>>>(ptr<T>(grad_out), ptr<int64_t>(indices),
                                                            ptr<T>(grad_in), HW, L, n);
      MINIDL_CUDA_LAUNCH_CHECK();
      return;
    }
    max_pool_bwd_atomic<T, A><<<grid_for(n), kBlock, 0, s>>>(
        ptr<T>(grad_out), ptr<int64_t>(indices), ptr<A>(acc), HW, L, n);
    MINIDL_CUDA_LAUNCH_CHECK();
    if constexpr (!same) {
      cast_from_float<T>
          <<<grid_for(total), kBlock, 0, s>>>(ptr<float>(acc), ptr<T>(grad_in), total);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
  });
}

void avg_pool2d_kernel(const Tensor& x, Tensor& out, const Pool2dParams& p) {
  const int64_t n = out.numel();
  if (n == 0) return;
  TensorDeviceGuard guard(x);
  const PoolGeom g = pool_geom(x.shape(), out.shape(), p);
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<typename T>() {
    avg_pool_kernel<T><<<grid_for(n), kBlock, 0, stream_of(x)>>>(ptr<T>(x), ptr<T>(out), g, n);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

void avg_pool2d_backward_kernel(const Tensor& grad_out, Tensor& grad_in, const Pool2dParams& p) {
  const int64_t n = grad_in.numel();
  if (n == 0) return;
  TensorDeviceGuard guard(grad_in);
  const PoolGeom g = pool_geom(grad_in.shape(), grad_out.shape(), p);
  dispatch_floating(grad_in.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    avg_pool_bwd_kernel<T>
        <<<grid_for(n), kBlock, 0, stream_of(grad_in)>>>(ptr<T>(grad_out), ptr<T>(grad_in), g, n);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void register_pool_kernels() {
  register_kernel<Op::max_pool2d>(DeviceType::cuda, max_pool2d_kernel);
  register_kernel<Op::max_pool2d_backward>(DeviceType::cuda, max_pool2d_backward_kernel);
  register_kernel<Op::avg_pool2d>(DeviceType::cuda, avg_pool2d_kernel);
  register_kernel<Op::avg_pool2d_backward>(DeviceType::cuda, avg_pool2d_backward_kernel);
}

}  // namespace minidl::cuda
