// CUDA kernels: strided copy with cast between every dtype pair, fill, arange. Mirrors
// tensor/cpu/copy.cpp, including its x86 float->int conversions (NaN / out of range -> INT_MIN).
#include <limits>
#include <type_traits>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

// Float -> signed integer as x86 cvtt* does (what the CPU kernel's static_cast compiles to):
// truncation toward zero, and the "integer indefinite" value (the type's minimum) for NaN and
// out-of-range inputs. CUDA's own conversion saturates instead, hence this.
template <typename I, typename F>
__device__ inline I x86_truncate(F v) {
  constexpr F lim = F(uint64_t(1) << (sizeof(I) * 8 - 1));              // 2^31 or 2^63, exact in F
  if (!(v > -lim && v < lim)) return std::numeric_limits<I>::lowest();  // -lim maps there too
  return static_cast<I>(v);
}

// Converts between element types through opmath like cpu::convert (bool: nonzero test; float->
// int truncates; float -> u8 goes through int32 as gcc compiles it, so it wraps modulo 256).
template <typename TO, typename TI>
__device__ inline TO convert(TI v) {
  using CI = opmath_t<TI>;
  if constexpr (std::is_same_v<TO, TI>) {
    return v;
  } else if constexpr (std::is_same_v<TO, bool>) {
    return static_cast<CI>(v) != CI(0);
  } else if constexpr (is_reduced_float_v<TO>) {
    return TO(static_cast<float>(static_cast<CI>(v)));
  } else if constexpr (std::is_integral_v<TO> && is_float_v<TI>) {
    if constexpr (sizeof(TO) == 8)
      return x86_truncate<int64_t>(static_cast<CI>(v));
    else
      return static_cast<TO>(x86_truncate<int32_t>(static_cast<CI>(v)));
  } else {
    return static_cast<TO>(static_cast<CI>(v));
  }
}

template <typename TO, typename TI>
struct Convert {
  __device__ TO operator()(TI v) const { return convert<TO, TI>(v); }
};

void copy_kernel(const Tensor& src, Tensor& dst) {
  MINIDL_CHECK(src.device() == dst.device(), "copy (CUDA): src on ", src.device(), ", dst on ",
               dst.device());
  if (dst.numel() == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    TensorDeviceGuard guard(dst);
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                      cudaMemcpyDeviceToDevice, stream_of(dst)));
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&]<typename TO>() {
    dispatch_all(src.dtype(), "copy",
                 [&]<typename TI>() { launch_elementwise<TO, TI>(dst, Convert<TO, TI>{}, src); });
  });
}

void fill_kernel(Tensor& out, Scalar value) {
  dispatch_all(out.dtype(), "fill",
               [&]<typename T>() { launch_elementwise<T>(out, Constant<T>{value.to<T>()}); });
}

// out[i] = start + i * step (integers in int64; floats in double, rounded once per operation
// like the CPU kernel, which is compiled without FMA contraction).
template <typename T>
__global__ void arange_kernel_impl(T* out, int64_t n, double start, double step) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (std::is_integral_v<T>) {
      const uint64_t v = uint64_t(int64_t(start)) + uint64_t(i) * uint64_t(int64_t(step));
      out[i] = T(int64_t(v));
    } else {
      out[i] = T(static_cast<opmath_t<T>>(__dadd_rn(start, __dmul_rn(double(i), step))));
    }
  }
}

void arange_kernel(Tensor& out, double start, double step) {
  MINIDL_CHECK(out.is_contiguous(), "arange (CUDA): output must be contiguous, got strides of ",
               out.shape_str());
  const int64_t n = out.numel();
  dispatch_numeric_types(out.dtype(), "arange", [&]<typename T>() {
    if (n == 0) return;
    TensorDeviceGuard guard(out);
    arange_kernel_impl<T>
        <<<grid_for(n), kBlock, 0, stream_of(out)>>>(out.data_ptr<T>(), n, start, step);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void register_copy_kernels() {
  register_kernel<Op::copy>(DeviceType::cuda, copy_kernel);
  register_kernel<Op::fill>(DeviceType::cuda, fill_kernel);
  register_kernel<Op::arange>(DeviceType::cuda, arange_kernel);
}

}  // namespace minidl::cuda
