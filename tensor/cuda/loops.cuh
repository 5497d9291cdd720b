// CUDA elementwise machinery: out[i] = f(in0[i], in1[i], ...) over tensors of one shape with
// any strides (broadcast strides of 0 included). Contiguous, 16-byte aligned operands take a
// vectorised path (one 16-byte load/store per operand per thread step); the rest use an
// offset calculator over the coalesced shape (cpu::make_row_plan), 32-bit index math when
// the byte offsets fit.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>

#include "tensor/cpu/loops.h"
#include "tensor/cuda/common.cuh"

namespace minidl::cuda {

inline constexpr int kMaxLoopDims = 10;

// Byte offsets of N operands for a linear element index over a coalesced shape.
template <int N, typename Index>
struct OffsetCalculator {
  int ndim = 0;
  Index sizes[kMaxLoopDims];
  Index strides[kMaxLoopDims][N];  // bytes

  __device__ inline void get(Index linear, Index (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      Index i = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[d][k];
    }
  }
};

// Whether every byte offset of the plan fits a 32-bit index.
template <size_t N>
bool fits_32bit(const cpu::RowPlan<N>& p) {
  if (p.numel >= (int64_t(1) << 31)) return false;
  for (size_t k = 0; k < N; ++k) {
    int64_t span = 0;
    for (size_t d = 0; d < p.shape.size(); ++d)
    {
      if (p.stride[k][d] < 0) return false;
      span += (p.shape[d] - 1) * p.stride[k][d];
    }
    if (span >= (int64_t(1) << 31)) return false;
  }
  return true;
}

template <int N, typename Index, size_t M>
OffsetCalculator<N, Index> make_offset_calculator(const cpu::RowPlan<M>& p) {
  static_assert(size_t(N) == M);
  OffsetCalculator<N, Index> c;
  MINIDL_CHECK(p.shape.size() <= size_t(kMaxLoopDims), "CUDA elementwise: ", p.shape.size(),
               " non-mergeable dims (at most ", kMaxLoopDims, " supported)");
  c.ndim = int(p.shape.size());
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = Index(p.shape[size_t(d)]);
    for (int k = 0; k < N; ++k) c.strides[d][k] = Index(p.stride[size_t(k)][size_t(d)]);
  }
  return c;
}

template <typename T, int V>
struct alignas(sizeof(T) * V) AlignedVector {
  T v[V];
};

// ---- kernels. f receives the input values (their element types) and returns the output.
template <typename Out, typename F, typename Index, typename... In>
__global__ void elementwise_strided_kernel(Index n, OffsetCalculator<1 + sizeof...(In), Index> calc,
                                           char* out, F f, std::array<const char*, sizeof...(In)> ins) {
  constexpr int N = 1 + sizeof...(In);
  const Index step = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    Index off[N];
    calc.get(i, off);
    [&]<size_t... K>(std::index_sequence<K...>) {
      *reinterpret_cast<Out*>(out + off[0]) =
          f(*reinterpret_cast<const In*>(ins[K] + off[K + 1])...);
    }(std::index_sequence_for<In...>{});
  }
}

template <int V, typename Out, typename F, typename... In>
__global__ void elementwise_vector_kernel(int64_t n, Out* out, F f, const In*... ins) {
  const int64_t nvec = n / V;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec; i += step) {
    auto loaded = std::make_tuple(reinterpret_cast<const AlignedVector<In, V>*>(ins)[i]...);
    AlignedVector<Out, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j)
      r.v[j] = std::apply([&](const auto&... vs) { return f(vs.v[j]...); }, loaded);
    reinterpret_cast<AlignedVector<Out, V>*>(out)[i] = r;
  }
  // tail
  for (int64_t i = nvec * V + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = f(ins[i]...);
}

namespace detail {
inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
template <typename>
struct AsTensor {
  using type = Tensor;
};
template <typename T>
constexpr int vec_width() {
  return sizeof(T) >= 16 ? 1 : int(16 / sizeof(T));
}
}  // namespace detail

// out = f(ins...) elementwise. Out and In... are the element types of out and the inputs
// (checked against the tensors' dtypes); every tensor has out's shape; all on one device.
template <typename Out, typename... In, typename F>
void launch_elementwise(Tensor& out, F f, const typename detail::AsTensor<In>::type&... ins_t) {
  static_assert(sizeof...(In) == sizeof...(ins_t), "one element type per input");
  const int64_t n = out.numel();
  if (n == 0) return;
  MINIDL_CHECK(out.dtype() == dtype_of<Out>(), "internal: CUDA elementwise output dtype ",
               out.dtype());
  if constexpr (sizeof...(In) > 0) {
    const DType in_dtypes[] = {ins_t.dtype()...};
    const DType expected[] = {dtype_of<In>()...};
    for (size_t k = 0; k < sizeof...(In); ++k)
      MINIDL_CHECK(in_dtypes[k] == expected[k], "internal: CUDA elementwise input ", k,
                   " has dtype ", in_dtypes[k], ", expected ", expected[k]);
  }
  TensorDeviceGuard guard(out);
  cudaStream_t stream = stream_of(out);
  std::array<const Tensor*, 1 + sizeof...(In)> ts{&out, &ins_t...};
  bool contiguous = true;
  for (const Tensor* t : ts) contiguous = contiguous && t->is_contiguous() && detail::aligned16(t->data_ptr());
  constexpr int V = detail::vec_width<Out>();
  if (contiguous && ((detail::vec_width<In>() >= V) && ...)) {
    const unsigned grid = grid_for((n + V - 1) / V);
    elementwise_vector_kernel<V, Out><<<grid, kBlock, 0, stream>>>(
        n, static_cast<Out*>(out.data_ptr()), f, static_cast<const In*>(ins_t.data_ptr())...);
    MINIDL_CUDA_LAUNCH_CHECK();
    return;
  }
  auto plan = cpu::make_row_plan<1 + sizeof...(In)>(ts);
  std::array<const char*, sizeof...(In)> ins{static_cast<const char*>(ins_t.data_ptr())...};
  char* o = static_cast<char*>(out.data_ptr());
  if (fits_32bit(plan)) {
    auto calc = make_offset_calculator<1 + sizeof...(In), uint32_t>(plan);
    elementwise_strided_kernel<Out, F, uint32_t, In...>
        <<<grid_for(n), kBlock, 0, stream>>>(uint32_t(n), calc, o, f, ins);
  } else {
    auto calc = make_offset_calculator<1 + sizeof...(In), int64_t>(plan);
    elementwise_strided_kernel<Out, F, int64_t, In...>
        <<<grid_for(n), kBlock, 0, stream>>>(n, calc, o, f, ins);
  }
  MINIDL_CUDA_LAUNCH_CHECK();
}

}  // namespace minidl::cuda
