// CUDA kernels of the AMP ops: non_finite_check_and_unscale (multi-tensor apply: one launch per
// dtype and 320 chunks of 64Ki elements) and amp_update_scale (a 1-thread kernel), so the
// GradScaler's scale and growth tracker never leave the device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/multi_tensor.cuh"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {
using namespace mta;

// x = x * inv (unchanged when inv == 1); *found_inf = 1 when x was inf/NaN. Padding elements
// of the unaligned path are zeros and never flag.
template <typename C>
struct UnscaleOp {
  float* found_inf;
  float inv;
  __device__ void operator()(C (&r)[1][kILP]) const {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const C v = r[0][k];
      if (!isfinite(v)) *found_inf = 1.0f;  // benign race: every writer stores 1
      r[0][k] = inv == 1.0f ? v : v * C(inv);
    }
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(TensorListArgs<1> a, float* found_inf, const float* inv_scale) {
  using C = opmath_t<T>;
  chunk_apply<T, 1>(a, UnscaleOp<C>{found_inf, *inv_scale});
}

void non_finite_check_and_unscale_kernel(const std::vector<Tensor>& grads, Tensor& found_inf,
                                         const Tensor& inv_scale) {
  if (grads.empty()) return;
  TensorDeviceGuard guard(found_inf);
  const cudaStream_t stream = stream_of(found_inf);
  float* fi = static_cast<float*>(found_inf.data_ptr());
  const float* inv = static_cast<const float*>(inv_scale.data_ptr());
  // Strided gradients go through contiguous copies written back afterwards.
  for_each_dtype_dense(grads, true, [&](const std::vector<Tensor>& g, DType dt) {
    dispatch_floating(dt, "non_finite_check_and_unscale", [&]<typename T>() {
      multi_tensor_apply<1>({&g}, nullptr, nullptr, [&](const auto& a, int blocks) {
        unscale_kernel<T><<<blocks, kThreads, 0, stream>>>(a, fi, inv);
        MINIDL_CUDA_LAUNCH_CHECK();
      });
    });
  });
}

// PyTorch's _amp_update_scale_cuda_kernel.
__global__ void update_scale_kernel(float* scale, int32_t* tracker, const float* found_inf,
                                    double growth, double backoff, int64_t interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(double(*scale) * backoff);
    *tracker = 0;
    return;
  }
  const int32_t successful = *tracker + 1;
  if (successful == interval) {
    const float grown = static_cast<float>(double(*scale) * growth);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker = successful;
  }
}

void amp_update_scale_kernel(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  TensorDeviceGuard guard(scale);
  update_scale_kernel<<<1, 1, 0, stream_of(scale)>>>(
      static_cast<float*>(scale.data_ptr()), static_cast<int32_t*>(growth_tracker.data_ptr()),
      static_cast<const float*>(found_inf.data_ptr()), growth_factor, backoff_factor,
      growth_interval);
  MINIDL_CUDA_LAUNCH_CHECK();
}

}  // namespace

void register_amp_kernels() {
  register_kernel<Op::non_finite_check_and_unscale>(DeviceType::cuda,
                                                    non_finite_check_and_unscale_kernel);
  register_kernel<Op::amp_update_scale>(DeviceType::cuda, amp_update_scale_kernel);
}

}  // namespace minidl::cuda
