// CUDA elementwise machinery: out[i] = f(in0[i], in1[i], ...) over tensors of one shape with
// any strides (broadcast strides of 0 included). Contiguous aligned operands (and inputs that
// are one broadcast value, e.g. x * scalar) take a vectorised path: 16-byte loads/stores, several
// vectors in flight per thread. The rest use an offset calculator over the coalesced shape
// (cpu::make_row_plan) with magic-number division when the byte offsets fit 32 bits.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>

#include "tensor/cpu/loops.h"
#include "tensor/cuda/runtime/common.cuh"

namespace minidl::cuda {

inline constexpr int kMaxLoopDims = 12;
inline constexpr int kVecUnroll = 2;      // 16-byte vectors per operand per thread per tile
inline constexpr int kStridedUnroll = 2;  // elements per thread per tile on the strided path

// Division by a fixed divisor d (1 <= d < 2^31) for dividends n < 2^31: q = (umulhi(n,m)+n)>>s.
struct FastDivmod {
  uint32_t d = 1, m = 1, s = 0;
  FastDivmod() = default;
  explicit FastDivmod(uint32_t div) : d(div) {
    while (s < 32 && (uint64_t(1) << s) < d) ++s;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
  }
  __device__ inline uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

template <typename Index>
struct Divider {  // plain division (64-bit offsets)
  Index d = 1;
  Divider() = default;
  explicit Divider(Index v) : d(v) {}
  __device__ inline Index div(Index n) const { return n / d; }
};
template <>
struct Divider<uint32_t> : FastDivmod {
  using FastDivmod::FastDivmod;
};

// Byte offsets of N operands for a linear element index over a coalesced shape; dims are
// stored innermost first.
template <int N, typename Index>
struct OffsetCalculator {
  int ndim = 0;
  Divider<Index> sizes[kMaxLoopDims];
  Index strides[kMaxLoopDims][N];  // bytes

  __device__ inline void get(Index linear, Index (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (ndim == 1) {  // the common contiguous-after-coalescing case: no division
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = linear * strides[0][k];
      return;
    }
#pragma unroll
    for (int d = 0; d < kMaxLoopDims; ++d) {
      if (d == ndim) break;
      const Index q = sizes[d].div(linear);
      const Index i = linear - q * sizes[d].d;
      linear = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[d][k];
    }
  }
};

// Whether every byte offset of the plan fits a 32-bit index (and 32-bit magic division).
template <size_t N>
bool fits_32bit(const cpu::RowPlan<N>& p) {
  if (p.numel >= (int64_t(1) << 31)) return false;
  for (size_t k = 0; k < N; ++k) {
    int64_t span = 0;
    for (size_t d = 0; d < p.shape.size(); ++d) {
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
    const size_t src = size_t(c.ndim - 1 - d);  // innermost first
    c.sizes[d] = Divider<Index>(Index(p.shape[src]));
    for (int k = 0; k < N; ++k) c.strides[d][k] = Index(p.stride[size_t(k)][src]);
  }
  return c;
}

template <typename T, int V>
struct alignas(sizeof(T) * V) AlignedVector {
  T v[V];
};

// A vector-path input: a contiguous aligned array, or (scalar) one value broadcast everywhere.
template <typename T>
struct VecArg {
  const T* p;
  bool scalar;
};

template <int V, typename T>
__device__ inline AlignedVector<T, V> load_vec(const VecArg<T>& a, int64_t i) {
  if (a.scalar) {
    AlignedVector<T, V> r;
    const T x = *a.p;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = x;
    return r;
  }
  return reinterpret_cast<const AlignedVector<T, V>*>(a.p)[i];
}

// ---- kernels. f receives the input values (their element types) and returns the output.
// Strided: each thread handles kStridedUnroll elements per tile (offsets and loads first, then
// stores).
template <typename Out, typename F, typename Index, typename... In>
__global__ void __launch_bounds__(kBlock)
    elementwise_strided_kernel(Index n, OffsetCalculator<1 + sizeof...(In), Index> calc, char* out,
                               F f, std::array<const char*, sizeof...(In)> ins) {
  constexpr int N = 1 + sizeof...(In);
  const Index tile = Index(kBlock) * kStridedUnroll;
  for (Index base = Index(blockIdx.x) * tile; base < n; base += Index(gridDim.x) * tile) {
    Out r[kStridedUnroll];
    Index off[kStridedUnroll][N];
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      const Index i = base + Index(u) * kBlock + threadIdx.x;
      if (i < n) {
        calc.get(i, off[u]);
        [&]<size_t... K>(std::index_sequence<K...>) {
          r[u] = f(*reinterpret_cast<const In*>(ins[K] + off[u][K + 1])...);
        }
        (std::index_sequence_for<In...>{});
      }
    }
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u)
      if (base + Index(u) * kBlock + threadIdx.x < n)
        *reinterpret_cast<Out*>(out + off[u][0]) = r[u];
  }
}

// Vectorised: tiles of kBlock * kVecUnroll vectors of V elements; all loads of a tile are issued
// before its stores (out may alias an input, so the compiler cannot reorder them itself).
template <int V, typename Out, typename F, typename... In>
__global__ void __launch_bounds__(kBlock)
    elementwise_vector_kernel(int64_t n, Out* out, F f, VecArg<In>... ins) {
  const int64_t nvec = n / V;
  const int64_t tile = int64_t(kBlock) * kVecUnroll;
  for (int64_t base = int64_t(blockIdx.x) * tile; base < nvec; base += int64_t(gridDim.x) * tile) {
    std::tuple<AlignedVector<In, V>...> loaded[kVecUnroll];
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int64_t i = base + u * kBlock + threadIdx.x;
      if (i < nvec) loaded[u] = std::tuple<AlignedVector<In, V>...>(load_vec<V>(ins, i)...);
    }
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int64_t i = base + u * kBlock + threadIdx.x;
      if (i < nvec) {
        AlignedVector<Out, V> r;
#pragma unroll
        for (int j = 0; j < V; ++j)
          r.v[j] = std::apply([&](const auto&... vs) { return f(vs.v[j]...); }, loaded[u]);
        reinterpret_cast<AlignedVector<Out, V>*>(out)[i] = r;
      }
    }
  }
  // tail: fewer than V elements, one block
  const int64_t i = nvec * V + threadIdx.x;
  if (blockIdx.x == 0 && i < n) out[i] = f(ins.p[ins.scalar ? 0 : i]...);
}

// Functor for fills: launch_elementwise<T>(out, Constant<T>{v}).
template <typename T>
struct Constant {
  T value;
  __device__ T operator()() const { return value; }
};

namespace detail {
template <typename>
struct AsTensor {
  using type = Tensor;
};
// True when every stride is 0 (one value broadcast to the whole shape).
inline bool all_strides_zero(const Tensor& t) {
  return std::all_of(t.strides().begin(), t.strides().end(), [](int64_t s) { return s == 0; });
}
inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
}  // namespace detail

// dispatch_numeric without instantiating fn for bool (dtype.h's version compiles the bool
// branch too, which would add dead kernels): f32 f64 f16 bf16 i32 i64 u8; bool throws.
template <typename Fn>
void dispatch_numeric_types(DType t, std::string_view op, Fn&& fn) {
  switch (t) {
#define MINIDL_DTYPE(name, T, ...)                                              \
  case DType::name:                                                             \
    if constexpr (!std::is_same_v<T, bool>) return fn.template operator()<T>(); \
    break;
#include "tensor/dtypes.def"
#undef MINIDL_DTYPE
  }
  MINIDL_FAIL("op `", op, "` does not support dtype bool");
}

// out = f(ins...) elementwise. Out and In... are the element types of out and the inputs
// (checked against the tensors' dtypes); every tensor has out's shape; all on one device.
template <typename Out, typename... In, typename F>
void launch_elementwise(Tensor& out, F f, const typename detail::AsTensor<In>::type&... ins_t) {
  static_assert(sizeof...(In) == sizeof...(ins_t), "one element type per input");
  const int64_t n = out.numel();
  if (n == 0) return;
  MINIDL_CHECK(out.dtype() == dtype_of<Out>(), "internal: CUDA elementwise output dtype ",
               out.dtype(), ", expected ", dtype_of<Out>());
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
  for (const Tensor* t : ts)
    MINIDL_CHECK(t->shape() == out.shape() && t->device() == out.device(),
                 "internal: CUDA elementwise operand ", t->shape_str(), " on ", t->device(),
                 ", output ", out.shape_str(), " on ", out.device());

  // Vector path: V = 16 bytes / widest element; each operand contiguous and aligned to its
  // vector size, or (inputs only) a broadcast scalar.
  constexpr size_t kWidest = std::max({sizeof(Out), sizeof(In)...});
  constexpr int V = int(16 / kWidest);
  const bool scalar[] = {false, (n > 1 && detail::all_strides_zero(ins_t))...};
  const size_t esize[] = {sizeof(Out), sizeof(In)...};
  bool vectorisable = true;
  for (size_t k = 0; k < ts.size(); ++k)
    vectorisable = vectorisable &&
                   (scalar[k] || (ts[k]->is_contiguous() &&
                                  detail::aligned_to(ts[k]->data_ptr(), esize[k] * size_t(V))));
  if (vectorisable) {
    const int64_t tile = int64_t(kBlock) * kVecUnroll, tiles = (n / V + tile - 1) / tile;
    const unsigned grid = unsigned(std::clamp<int64_t>(tiles, 1, int64_t(1) << 20));
    Out* o = static_cast<Out*>(out.data_ptr());
    [&]<size_t... K>(std::index_sequence<K...>) {
      elementwise_vector_kernel<V, Out><<<grid, kBlock, 0, stream>>>(
          n, o, f, VecArg<In>{static_cast<const In*>(ins_t.data_ptr()), scalar[K + 1]}...);
    }
    (std::index_sequence_for<In...>{});
    MINIDL_CUDA_LAUNCH_CHECK();
    return;
  }
  auto plan = cpu::make_row_plan<1 + sizeof...(In)>(ts);
  std::array<const char*, sizeof...(In)> ins{static_cast<const char*>(ins_t.data_ptr())...};
  char* o = static_cast<char*>(out.data_ptr());
  const unsigned grid = grid_for(n, kBlock * kStridedUnroll);
  if (fits_32bit(plan)) {
    auto calc = make_offset_calculator<1 + sizeof...(In), uint32_t>(plan);
    elementwise_strided_kernel<Out, F, uint32_t, In...>
        <<<grid, kBlock, 0, stream>>>(uint32_t(n), calc, o, f, ins);
  } else {
    auto calc = make_offset_calculator<1 + sizeof...(In), int64_t>(plan);
    elementwise_strided_kernel<Out, F, int64_t, In...>
        <<<grid, kBlock, 0, stream>>>(n, calc, o, f, ins);
  }
  MINIDL_CUDA_LAUNCH_CHECK();
}

}  // namespace minidl::cuda
