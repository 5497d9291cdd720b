// CUDA topk along a dim, mirroring tensor/cpu/index.cpp: largest (smallest) first, NaN counts as
// the largest value, ties keep the lower index first. Each row is sorted completely by a bitonic
// network on order-preserving unsigned keys (values -> U, ties broken by index): in shared
// memory for rows of up to 2048 elements (one block per row), else in global memory (one launch
// per network stage). Output is always sorted (CPU: sorted=false leaves the order unspecified).
#include <cstdint>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"

namespace minidl::cuda {
namespace {

constexpr int64_t kSmemRow = 2048;  // longest padded row sorted in shared memory

// Unsigned key type of an element type and the order-preserving map (NaN -> largest key, -0.0
// -> +0.0 so that zeros tie like the CPU's comparisons).
template <typename T>
struct Key;
template <>
struct Key<float> {
  using U = uint32_t;
  __device__ static U of(float v) {
    if (v != v) return ~U(0);
    const U u = v == 0.0f ? 0u : __float_as_uint(v);
    return (u >> 31) ? ~u : u | 0x80000000u;
  }
};
template <>
struct Key<double> {
  using U = uint64_t;
  __device__ static U of(double v) {
    if (v != v) return ~U(0);
    const U u = v == 0.0 ? 0ull : U(__double_as_longlong(v));
    return (u >> 63) ? ~u : u | (U(1) << 63);
  }
};
template <uint16_t kInf>
__device__ inline uint16_t half_key(uint16_t b) {
  if ((b & 0x7fffu) > kInf) return 0xffffu;  // NaN
  if ((b & 0x7fffu) == 0) b = 0;
  return (b & 0x8000u) ? uint16_t(~b) : uint16_t(b | 0x8000u);
}
template <>
struct Key<Half> {
  using U = uint16_t;
  __device__ static U of(Half v) { return half_key<0x7c00u>(v.bits); }
};
template <>
struct Key<BFloat16> {
  using U = uint16_t;
  __device__ static U of(BFloat16 v) { return half_key<0x7f80u>(v.bits); }
};
template <>
struct Key<int32_t> {
  using U = uint32_t;
  __device__ static U of(int32_t v) { return U(v) ^ 0x80000000u; }
};
template <>
struct Key<int64_t> {
  using U = uint64_t;
  __device__ static U of(int64_t v) { return U(v) ^ (U(1) << 63); }
};
template <>
struct Key<uint8_t> {
  using U = uint8_t;
  __device__ static U of(uint8_t v) { return v; }
};

// Sort key of element i of a row (largest: key, smallest: ~key; both sorted descending).
// Padding slots (i >= n) get the worst key and an index past every real one.
template <typename T>
__device__ inline typename Key<T>::U row_key(const T* row, int64_t xs, int64_t i, int64_t n,
                                             bool largest) {
  using U = typename Key<T>::U;
  if (i >= n) return U(0);
  const U k = Key<T>::of(row[i * xs]);
  return largest ? k : U(~k);
}

// Element (ka, ia) comes before (kb, ib): larger key first, then lower index.
template <typename U>
__device__ inline bool before(U ka, int32_t ia, U kb, int32_t ib) {
  return ka > kb || (ka == kb && ia < ib);
}

// One compare-exchange of a bitonic network stage (size, stride) on pair t of one row.
template <typename U>
__device__ inline void bitonic_step(U* keys, int32_t* ids, int64_t t, int64_t size,
                                    int64_t stride) {
  const int64_t i = 2 * t - (t & (stride - 1)), j = i + stride;
  const bool up = (i & size) == 0;
  if (before(keys[j], ids[j], keys[i], ids[i]) == up) {
    const U k = keys[i];
    keys[i] = keys[j];
    keys[j] = k;
    const int32_t d = ids[i];
    ids[i] = ids[j];
    ids[j] = d;
  }
}

// Writes entries [0, k) of a sorted row: values from x at the chosen index, and the index.
template <typename T>
__device__ inline void write_row(const int32_t* ids, int64_t k, int64_t t0, int64_t step,
                                 const T* row, int64_t xs, T* v, int64_t vs, int64_t* ix,
                                 int64_t is) {
  for (int64_t j = t0; j < k; j += step) {
    const int64_t id = ids[j];
    v[j * vs] = row[id * xs];
    ix[j * is] = id;
  }
}

// Shared-memory path: one block per row, N (power of two, <= kSmemRow) padded slots.
// calc gives the element offsets of row r in x, values, indices.
template <typename T>
__global__ void topk_smem_kernel(int64_t rows, OffsetCalculator<3, int64_t> calc, const T* x,
                                 int64_t xs, int64_t n, int N, int64_t k, bool largest, T* v,
                                 int64_t vs, int64_t* ix, int64_t is) {
  using U = typename Key<T>::U;
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* ids = reinterpret_cast<int32_t*>(smem);
  U* keys = reinterpret_cast<U*>(smem + ((N * 4 + 15) & ~15));
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t off[3];
    calc.get(r, off);
    const T* row = x + off[0];
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
      keys[i] = row_key(row, xs, i, n, largest);
      ids[i] = i;
    }
    __syncthreads();
    for (int64_t size = 2; size <= N; size <<= 1) {
      for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
        for (int t = threadIdx.x; t < N / 2; t += blockDim.x)
          bitonic_step(keys, ids, t, size, stride);
        __syncthreads();
      }
    }
    write_row(ids, k, threadIdx.x, blockDim.x, row, xs, v + off[1], vs, ix + off[2], is);
    __syncthreads();  // the next row reuses the shared arrays
  }
}

// Global path: keys/ids:[rows, N] filled from x, sorted stage by stage, first k written out.
template <typename T>
__global__ void topk_init_kernel(int64_t total, OffsetCalculator<3, int64_t> calc, const T* x,
                                 int64_t xs, int64_t n, int64_t N, bool largest,
                                 typename Key<T>::U* keys, int32_t* ids) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const int64_t r = p / N, i = p - r * N;
    int64_t off[3];
    calc.get(r, off);
    keys[p] = row_key(x + off[0], xs, i, n, largest);
    ids[p] = int32_t(i);
  }
}

template <typename U>
__global__ void bitonic_stage_kernel(int64_t pairs, int64_t N, U* keys, int32_t* ids, int64_t size,
                                     int64_t stride) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x, half = N / 2;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += step) {
    const int64_t r = p / half;
    bitonic_step(keys + r * N, ids + r * N, p - r * half, size, stride);
  }
}

template <typename T>
__global__ void topk_write_kernel(int64_t total, OffsetCalculator<3, int64_t> calc,
                                  const int32_t* ids, int64_t N, const T* x, int64_t xs, int64_t k,
                                  T* v, int64_t vs, int64_t* ix, int64_t is) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const int64_t r = p / k, j = p - r * k;
    int64_t off[3];
    calc.get(r, off);
    write_row(ids + r * N + j, 1, 0, 1, x + off[0], xs, v + off[1] + j * vs, vs,
              ix + off[2] + j * is, is);
  }
}

// Rows of one topk call: every dim but `dim` (element offsets of x, values, indices).
struct TopkGeom {
  OffsetCalculator<3, int64_t> calc;
  int64_t rows, n, N, k, xs, vs, is;
  bool largest;
};

template <typename T>
void topk_typed(const TopkGeom& g, const Tensor& x, Tensor& values, Tensor& indices) {
  using U = typename Key<T>::U;
  cudaStream_t stream = stream_of(x);
  const T* px = x.data_ptr<T>();
  T* pv = values.data_ptr<T>();
  int64_t* pi = indices.data_ptr<int64_t>();
  const int64_t rows = g.rows, N = g.N, k = g.k;
  if (N <= kSmemRow) {
    const int threads = int(N / 2 < 32 ? 32 : N / 2 > 512 ? 512 : N / 2);
    const size_t smem = size_t((N * 4 + 15) & ~int64_t(15)) + size_t(N) * sizeof(U);
    const unsigned blocks = unsigned(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20));
    topk_smem_kernel<T><<<blocks, threads, smem, stream>>>(rows, g.calc, px, g.xs, g.n, int(N), k,
                                                           g.largest, pv, g.vs, pi, g.is);
    MINIDL_CUDA_LAUNCH_CHECK();
    return;
  }
  Tensor keys = empty({rows * N * int64_t(sizeof(U))}, kUInt8, x.device());
  Tensor ids = empty({rows * N}, kInt32, x.device());
  U* pk = static_cast<U*>(keys.data_ptr());
  int32_t* pd = ids.data_ptr<int32_t>();
  topk_init_kernel<T><<<grid_for(rows * N), kBlock, 0, stream>>>(rows * N, g.calc, px, g.xs, g.n, N,
                                                                 g.largest, pk, pd);
  MINIDL_CUDA_LAUNCH_CHECK();
  const int64_t pairs = rows * N / 2;
  for (int64_t size = 2; size <= N; size <<= 1) {
    for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
      bitonic_stage_kernel<U>
          <<<grid_for(pairs), kBlock, 0, stream>>>(pairs, N, pk, pd, size, stride);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
  }
  topk_write_kernel<T><<<grid_for(rows * k), kBlock, 0, stream>>>(rows * k, g.calc, pd, N, px, g.xs,
                                                                  k, pv, g.vs, pi, g.is);
  MINIDL_CUDA_LAUNCH_CHECK();
}

// topk along dim: values/indices have x's shape with size k at dim.
void topk_kernel(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/,
                 Tensor& values, Tensor& indices) {
  if (values.numel() == 0) return;
  TopkGeom g;
  g.n = x.size(dim);
  MINIDL_CHECK(g.n <= (int64_t(1) << 30), "op `topk`: CUDA supports rows of at most 2^30 ",
               "elements, got ", g.n, " (shape ", x.shape_str(), ")");
  for (int64_t d = x.dim() - 1; d >= 0; --d) {  // innermost first
    if (d == dim || x.size(d) == 1) continue;
    MINIDL_CHECK(g.calc.ndim < kMaxLoopDims, "op `topk`: input ", x.shape_str(), " has more than ",
                 kMaxLoopDims, " non-trivial dims (CUDA)");
    g.calc.sizes[g.calc.ndim] = Divider<int64_t>(x.size(d));
    g.calc.strides[g.calc.ndim][0] = x.stride(d);
    g.calc.strides[g.calc.ndim][1] = values.stride(d);
    g.calc.strides[g.calc.ndim][2] = indices.stride(d);
    ++g.calc.ndim;
  }
  g.k = k;
  g.rows = values.numel() / k;
  g.N = 1;
  while (g.N < g.n) g.N <<= 1;
  g.xs = x.stride(dim);
  g.vs = values.stride(dim);
  g.is = indices.stride(dim);
  g.largest = largest;
  TensorDeviceGuard guard(x);
  dispatch_numeric(x.dtype(), "topk", [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) topk_typed<T>(g, x, values, indices);  // bool: rejected
  });
}

}  // namespace

void register_topk_kernel() {
  register_kernel<Op::topk>(DeviceType::cuda, topk_kernel);
}

}  // namespace minidl::cuda
