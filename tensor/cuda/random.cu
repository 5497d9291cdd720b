// CUDA kernels: uniform, normal, randint, bernoulli, mirroring tensor/cpu/random.cpp bit for bit
// (mapping in tensor/random.h): each thread computes one Philox block and stores its 4 (32-bit
// and normal draws) or 2 (64-bit draws) elements, one vector store when aligned. `out` is
// contiguous. Each kernel reserves exactly the counters the CPU kernel reserves.
// normal: Box-Muller uses the device's double log/cos/sin (<= 1-2 ulp, glibc's are ~0.5 ulp),
// so f64 (rarely f32/f16/bf16) normals may differ from the CPU's in the last bit; uniform,
// randint and bernoulli use exact integer/FMA arithmetic and match exactly.
#include <cstdint>
#include <type_traits>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/runtime/graph_rng.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"
#include "tensor/random.h"

namespace minidl::cuda {
namespace {

// from_op<T> (common.cuh) converts like the CPU's to_elem (f16/bf16 through float).
// Mantissa digits of a floating type (the random bits a uniform in [0,1) can hold exactly).
template <typename T>
constexpr int mantissa_digits() {
  if constexpr (std::is_same_v<T, Half>)
    return 11;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return 8;
  else
    return 24;
}

// out[b*EPB, (b+1)*EPB) = f(block b) for every block b of the draw; `vec`: out is aligned to
// EPB elements, so full blocks are stored with one vector store.
template <int EPB, typename T, typename F>
__global__ void random_fill_kernel(int64_t n, T* out, PhiloxArgs args, F f, bool vec) {
  const PhiloxStream s = args.stream();
  const int64_t blocks = (n + EPB - 1) / EPB;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += step) {
    AlignedVector<T, EPB> v;
    f(s.block(uint64_t(b)), v.v);
    if (vec && (b + 1) * EPB <= n) {
      reinterpret_cast<AlignedVector<T, EPB>*>(out)[b] = v;
    } else {
#pragma unroll
      for (int e = 0; e < EPB; ++e)
        if (b * EPB + e < n) out[b * EPB + e] = v.v[e];
    }
  }
}

// Reserves `counters` Philox blocks and launches the fill (nothing for an empty out).
template <int EPB, typename T, typename F>
void launch_fill(Tensor& out, uint64_t counters, Generator& gen, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  TensorDeviceGuard guard(out);
  const PhiloxArgs args = reserve_philox(gen, counters, out.device().index);
  T* o = static_cast<T*>(out.data_ptr());
  const bool vec = reinterpret_cast<uintptr_t>(o) % sizeof(AlignedVector<T, EPB>) == 0;
  random_fill_kernel<EPB, T, F>
      <<<grid_for((n + EPB - 1) / EPB), kBlock, 0, stream_of(out)>>>(n, o, args, f, vec);
  MINIDL_CUDA_LAUNCH_CHECK();
}

// ---- per-block conversions (functors: no extended lambdas in this build)
struct UniformF64 {
  double a, range;
  __device__ void operator()(const Philox4x32& r, double* v) const {
    for (unsigned k = 0; k < 2; ++k)
      v[k] = fma(PhiloxStream::to_unit_double(PhiloxStream::lane64(r, k)), range, a);
  }
};
template <typename T>
struct UniformF32 {
  float a, range;
  __device__ void operator()(const Philox4x32& r, T* v) const {
    for (unsigned k = 0; k < 4; ++k)
      v[k] = from_op<T>(fmaf(PhiloxStream::to_unit_float(r.v[k], mantissa_digits<T>()), range, a));
  }
};
template <typename T>
struct NormalF {
  double mean, stddev;
  __device__ void operator()(const Philox4x32& r, T* v) const {
    for (unsigned k = 0; k < 2; ++k) {
      double z0, z1;
      PhiloxStream::box_muller(PhiloxStream::lane64(r, k), z0, z1);
      v[2 * k] = from_op<T>(fma(z0, stddev, mean));
      v[2 * k + 1] = from_op<T>(fma(z1, stddev, mean));
    }
  }
};
template <typename T>
struct RandInt32 {
  int64_t low;
  uint64_t range;
  __device__ void operator()(const Philox4x32& r, T* v) const {
    for (unsigned k = 0; k < 4; ++k) v[k] = from_op<T>(low + int64_t(uint64_t(r.v[k]) % range));
  }
};
template <typename T>
struct RandInt64 {
  int64_t low;
  uint64_t range;
  __device__ void operator()(const Philox4x32& r, T* v) const {
    for (unsigned k = 0; k < 2; ++k)
      v[k] = from_op<T>(low + int64_t(PhiloxStream::lane64(r, k) % range));
  }
};
template <typename T>
struct BernoulliF {
  double p;
  T one, zero;
  __device__ void operator()(const Philox4x32& r, T* v) const {
    for (unsigned k = 0; k < 4; ++k) v[k] = double(r.v[k]) * (1.0 / 4294967296.0) < p ? one : zero;
  }
};

// a + (b - a) * u, u uniform in [0, 1).
void uniform_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  dispatch_floating(out.dtype(), "uniform", [&]<typename T>() {
    if constexpr (std::is_same_v<T, double>)
      launch_fill<2, double>(out, PhiloxStream::blocks64(n), gen, UniformF64{a, b - a});
    else
      launch_fill<4, T>(out, PhiloxStream::blocks32(n), gen, UniformF32<T>{float(a), float(b - a)});
  });
}

// mean a, std b (Box-Muller in double: 2 pairs per block).
void normal_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  dispatch_floating(out.dtype(), "normal", [&]<typename T>() {
    launch_fill<4, T>(out, PhiloxStream::blocks32(n), gen, NormalF<T>{a, b});
  });
}

// Integers in [a, b) (the frontend guarantees a < b, both exact in double).
void randint_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  const int64_t low = int64_t(a);
  const uint64_t range = uint64_t(int64_t(b) - low);
  dispatch_all(out.dtype(), "randint", [&]<typename T>() {
    if (range <= (uint64_t(1) << 32))
      launch_fill<4, T>(out, PhiloxStream::blocks32(n), gen, RandInt32<T>{low, range});
    else
      launch_fill<2, T>(out, PhiloxStream::blocks64(n), gen, RandInt64<T>{low, range});
  });
}

// b where u < a (u = word * 2^-32), else 0.
void bernoulli_kernel(Tensor& out, double a, double b, Generator& gen) {
  const uint64_t n = uint64_t(out.numel());
  dispatch_all(out.dtype(), "bernoulli", [&]<typename T>() {
    launch_fill<4, T>(out, PhiloxStream::blocks32(n), gen,
                      BernoulliF<T>{a, from_op<T>(b), from_op<T>(0.0)});
  });
}

}  // namespace

void register_random_kernels() {
  register_kernel<Op::uniform>(DeviceType::cuda, uniform_kernel);
  register_kernel<Op::normal>(DeviceType::cuda, normal_kernel);
  register_kernel<Op::randint>(DeviceType::cuda, randint_kernel);
  register_kernel<Op::bernoulli>(DeviceType::cuda, bernoulli_kernel);
}

}  // namespace minidl::cuda
