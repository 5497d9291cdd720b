// CUDA kernels: embedding, index_select, gather (restrided element copies; W-byte row copies on
// contiguous data), scatter_add and embedding_backward (sorted, deterministic), mirroring
// tensor/cpu/index.cpp. topk lives in index_topk.cu.
// Bounds: a kernel cannot throw and a host-side check would need a device sync, so indices
// outside [0, size) never read or write out of bounds: gathers store 0, scatters skip them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"
#include "tensor/ops.h"

namespace minidl::cuda {

void register_topk_kernel();  // index_topk.cu

namespace {

__device__ inline bool in_range(int64_t v, int64_t size) {
  return v >= 0 && v < size;
}

// out[p] = src[p + index[p] * jump] (byte offsets of out, src restrided with stride 0 along the
// indexed dim, and index, all over out's shape); indices outside [0, size) store 0.
template <typename B, typename Index>
__global__ void gather_strided_kernel(Index n, OffsetCalculator<3, Index> calc, char* out,
                                      const char* src, const char* idx, int64_t size,
                                      int64_t jump) {
  const Index step = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    Index off[3];
    calc.get(i, off);
    const int64_t v = *reinterpret_cast<const int64_t*>(idx + off[2]);
    B r = B(0);
    if (in_range(v, size)) r = *reinterpret_cast<const B*>(src + off[1] + v * jump);
    *reinterpret_cast<B*>(out + off[0]) = r;
  }
}

// Contiguous x:[outer, S, inner] -> out:[outer, m, inner], out[o, j, :] = x[o, index[j], :], in
// W-byte words (`words` per row); rows of out-of-range indices are zero.
template <typename W>
__global__ void index_rows_kernel(int64_t total, int64_t m, int64_t words, int64_t S, W* out,
                                  const W* x, const int64_t* index, int64_t istride) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / words, c = i - r * words;
    const int64_t o = r / m, j = r - o * m;
    const int64_t v = index[j * istride];
    out[i] = in_range(v, S) ? x[(o * S + v) * words + c] : W{};
  }
}

// out[p] = src[p + index[p] * src_dim_stride] over out's shape (src, index restrided to it).
void gather_loop(Tensor& out, const Tensor& src, const Tensor& index, int64_t size,
                 int64_t src_dim_stride) {
  const int64_t n = out.numel();
  if (n == 0) return;
  TensorDeviceGuard guard(out);
  cudaStream_t stream = stream_of(out);
  auto plan = cpu::make_row_plan<3>({&out, &src, &index});
  const int64_t jump = src_dim_stride * int64_t(out.element_size());
  dispatch_bits(out.element_size(), [&]<typename B>() {
    if (fits_32bit(plan)) {
      auto calc = make_offset_calculator<3, uint32_t>(plan);
      gather_strided_kernel<B, uint32_t><<<grid_for(n), kBlock, 0, stream>>>(
          uint32_t(n), calc, plan.base[0], plan.base[1], plan.base[2], size, jump);
    } else {
      auto calc = make_offset_calculator<3, int64_t>(plan);
      gather_strided_kernel<B, int64_t><<<grid_for(n), kBlock, 0, stream>>>(
          n, calc, plan.base[0], plan.base[1], plan.base[2], size, jump);
    }
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

template <typename W>
void launch_index_rows(Tensor& out, const Tensor& x, const Tensor& index, int64_t outer,
                       int64_t row_bytes, int64_t S) {
  const int64_t m = index.numel(), words = row_bytes / int64_t(sizeof(W));
  const int64_t total = outer * m * words;
  index_rows_kernel<W><<<grid_for(total), kBlock, 0, stream_of(out)>>>(
      total, m, words, S, static_cast<W*>(out.data_ptr()), static_cast<const W*>(x.data_ptr()),
      index.data_ptr<int64_t>(), index.stride(0));
  MINIDL_CUDA_LAUNCH_CHECK();
}

// x: any shape; index: 1-D int64 [m]; out: x's shape with size m at dim.
void index_select_impl(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  if (out.numel() == 0) return;
  TensorDeviceGuard guard(out);
  if (x.is_contiguous() && out.is_contiguous()) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    const int64_t row_bytes = inner * int64_t(x.element_size());
    const uintptr_t mix = uintptr_t(row_bytes) | reinterpret_cast<uintptr_t>(x.data_ptr()) |
                          reinterpret_cast<uintptr_t>(out.data_ptr());
    const int64_t S = x.size(dim);
    if (mix % 16 == 0) return launch_index_rows<uint4>(out, x, index, outer, row_bytes, S);
    if (mix % 8 == 0) return launch_index_rows<uint2>(out, x, index, outer, row_bytes, S);
    if (mix % 4 == 0) return launch_index_rows<uint32_t>(out, x, index, outer, row_bytes, S);
    if (mix % 2 == 0) return launch_index_rows<uint16_t>(out, x, index, outer, row_bytes, S);
    return launch_index_rows<uint8_t>(out, x, index, outer, row_bytes, S);
  }
  Strides xs = x.strides(), is(size_t(out.dim()), 0);
  xs[size_t(dim)] = 0;
  is[size_t(dim)] = index.stride(0);
  Tensor src = native::as_strided(x, out.shape(), xs, x.storage_offset());
  Tensor idx = native::as_strided(index, out.shape(), is, index.storage_offset());
  gather_loop(out, src, idx, x.size(dim), x.stride(dim));
}

void index_select_kernel(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  index_select_impl(x, dim, index, out);
}

// weight:[V,D], indices: any shape -> out:[*indices, D]
void embedding_kernel(const Tensor& weight, int64_t, const Tensor& indices, Tensor& out) {
  const int64_t n = indices.numel();
  Tensor o = native::view(out, {n, weight.size(1)});
  index_select_impl(weight, 0, native::reshape(indices, {n}), o);
}

// x, index, out: same rank; out has index's shape; index.size(d) <= x.size(d) for d != dim.
void gather_kernel(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  if (out.numel() == 0) return;
  Strides xs = x.strides();
  xs[size_t(dim)] = 0;
  Tensor src = native::as_strided(x, index.shape(), xs, x.storage_offset());
  gather_loop(out, src, index, x.size(dim), x.stride(dim));
}

// ---- scatter_add

// Atomic adds of the types with hardware atomics (f16 sm_70+, bf16 sm_80+).
__device__ inline void atomic_add(float* p, float v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(double* p, double v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(int32_t* p, int32_t v) {
  atomicAdd(reinterpret_cast<int*>(p), int(v));
}
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ inline void atomic_add(Half* p, Half v) {
  atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.bits));
}
__device__ inline void atomic_add(BFloat16* p, BFloat16 v) {
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.bits));
}
template <typename T>
constexpr bool has_atomic_add_v = !std::is_same_v<T, bool> && !std::is_same_v<T, uint8_t>;

// Deterministic: one thread per position q of index's shape with `dim` collapsed (element
// offsets of out, src, index); it adds the L values of its line in index order, exactly like
// the CPU kernel's work items. Distinct q never share an output element.
template <typename T>
__global__ void scatter_add_lines_kernel(int64_t n, OffsetCalculator<3, int64_t> calc, T* out,
                                         const T* src, const int64_t* idx, int64_t L, int64_t size,
                                         int64_t so_d, int64_t ss_d, int64_t si_d) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < n; q += step) {
    int64_t off[3];
    calc.get(q, off);
    T* o = out + off[0];
    const T* s = src + off[1];
    const int64_t* ix = idx + off[2];
    for (int64_t j = 0; j < L; ++j) {
      const int64_t v = ix[j * si_d];
      if (!in_range(v, size)) continue;
      T& dst = o[v * so_d];
      const T val = s[j * ss_d];
      if constexpr (std::is_same_v<T, bool>)
        dst = dst || val;
      else
        dst = from_op<T>(to_op(dst) + to_op(val));
    }
  }
}

// Atomic: one thread per element of index (out's offset excludes dim; index picks the row).
template <typename T>
__global__ void scatter_add_atomic_kernel(int64_t n, OffsetCalculator<3, int64_t> calc, T* out,
                                          const T* src, const int64_t* idx, int64_t size,
                                          int64_t so_d) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    int64_t off[3];
    calc.get(p, off);
    const int64_t v = idx[off[2]];
    if (in_range(v, size)) atomic_add(out + off[0] + v * so_d, src[off[1]]);
  }
}

// out[..., index[p], ...] += src[p] along dim, over index's shape. Lines along dim are summed
// in index order by one thread each (deterministic, = CPU order) unless there are few lines and
// they are long: then types with atomics scatter one element per thread (for floating dtypes
// the summation order, hence the last bits, may then vary from run to run).
void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t total = index.numel();
  if (total == 0) return;
  TensorDeviceGuard guard(out);
  cudaStream_t stream = stream_of(out);
  const int64_t L = index.size(dim), lines = total / L;
  const bool few_long_lines = L >= 8 && lines < 2 * int64_t(sm_count(out.device().index)) * kBlock;
  // Element offsets over index's shape, dim kept (atomic: out's dim stride 0) or collapsed.
  auto make_calc = [&](bool keep_dim) {
    OffsetCalculator<3, int64_t> calc;
    for (int64_t d = index.dim() - 1; d >= 0; --d) {  // innermost first
      const int64_t sz = d == dim ? (keep_dim ? L : 1) : index.size(d);
      if (sz == 1) continue;
      MINIDL_CHECK(calc.ndim < kMaxLoopDims, "op `scatter_add`: index ", index.shape_str(),
                   " has more than ", kMaxLoopDims, " non-trivial dims (CUDA)");
      calc.sizes[calc.ndim] = Divider<int64_t>(sz);
      calc.strides[calc.ndim][0] = d == dim ? 0 : out.stride(d);
      calc.strides[calc.ndim][1] = src.stride(d);
      calc.strides[calc.ndim][2] = index.stride(d);
      ++calc.ndim;
    }
    return calc;
  };
  const int64_t* pi = index.data_ptr<int64_t>();
  const int64_t size = out.size(dim), so_d = out.stride(dim);
  dispatch_all(out.dtype(), "scatter_add", [&]<typename T>() {
    T* po = out.data_ptr<T>();
    const T* ps = src.data_ptr<T>();
    if constexpr (has_atomic_add_v<T>) {
      if (few_long_lines) {
        scatter_add_atomic_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(
            total, make_calc(true), po, ps, pi, size, so_d);
        MINIDL_CUDA_LAUNCH_CHECK();
        return;
      }
    }
    scatter_add_lines_kernel<T><<<grid_for(lines), kBlock, 0, stream>>>(
        lines, make_calc(false), po, ps, pi, L, size, so_d, src.stride(dim), index.stride(dim));
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

// ---- embedding_backward

// keys[p] = indices[p] (out-of-range -> V, a bucket that is never written), pos[p] = p.
__global__ void embedding_keys_kernel(int64_t n, const int64_t* idx, int64_t istride, int64_t V,
                                      uint32_t* keys, int32_t* pos) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const int64_t v = idx[p * istride];
    keys[p] = uint32_t(in_range(v, V) ? v : V);
    pos[p] = int32_t(p);
  }
}

// grad_weight:[V,D] = 0 (strided).
template <typename B>
__global__ void zero_rows_kernel(int64_t n, int64_t D, B* w, int64_t ws0, int64_t ws1) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    w[(i / D) * ws0 + (i % D) * ws1] = B(0);
}

// Block i of the (stably) sorted positions: if it starts a run of equal keys v (v valid and
// not padding_idx), sums grad rows of the run in position order into grad_weight[v] (with
// accumulate: grad_weight[v] + the sum rounded to T).
template <typename T>
__global__ void embedding_sum_kernel(int64_t N, int64_t D, const uint32_t* keys, const int32_t* pos,
                                     const T* g, int64_t gs0, int64_t gs1, T* w, int64_t ws0,
                                     int64_t ws1, int64_t V, int64_t padding_idx, bool accumulate) {
  using A = opmath_t<T>;
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const uint32_t key = keys[i];
    if ((i > 0 && keys[i - 1] == key) || int64_t(key) == V || int64_t(key) == padding_idx) continue;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
      A acc = A(0);
      for (int64_t j = i; j < N && keys[j] == key; ++j)
        acc += static_cast<A>(g[int64_t(pos[j]) * gs0 + c * gs1]);
      T* out = w + int64_t(key) * ws0 + c * ws1;
      *out = accumulate ? T(static_cast<A>(*out) + static_cast<A>(T(acc))) : T(acc);
    }
  }
}

// grad_out:[*indices, D], indices int64 -> grad_weight:[V, D] (overwritten). A stable radix
// sort of (index, position) groups equal indices in position order; each run is summed by one
// block, so the result is deterministic and equals the CPU kernel's (same summation order).
void embedding_backward_kernel(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight,
                               int64_t padding_idx, bool accumulate) {
  const int64_t V = grad_weight.size(0), D = grad_weight.size(1), N = indices.numel();
  if (V * D == 0) return;
  MINIDL_CHECK(V < int64_t(UINT32_MAX) && N < int64_t(INT32_MAX),
               "op `embedding_backward`: CUDA supports num_weights < 2^32 - 1 and fewer than "
               "2^31 indices, got num_weights ",
               V, " and indices ", indices.shape_str());
  TensorDeviceGuard guard(grad_weight);
  cudaStream_t stream = stream_of(grad_weight);
  const Device dev = grad_weight.device();
  const int64_t ws0 = grad_weight.stride(0), ws1 = grad_weight.stride(1);
  if (!accumulate)
    dispatch_bits(grad_weight.element_size(), [&]<typename B>() {
      zero_rows_kernel<B><<<grid_for(V * D), kBlock, 0, stream>>>(
          V * D, D, static_cast<B*>(grad_weight.data_ptr()), ws0, ws1);
      MINIDL_CUDA_LAUNCH_CHECK();
    });
  if (N == 0) return;
  const Tensor idx = native::reshape(indices, {N});
  Tensor keys = empty({2, N}, kInt32, dev), pos = empty({2, N}, kInt32, dev);
  uint32_t* k = static_cast<uint32_t*>(keys.data_ptr());
  int32_t* p = pos.data_ptr<int32_t>();
  embedding_keys_kernel<<<grid_for(N), kBlock, 0, stream>>>(N, idx.data_ptr<int64_t>(),
                                                            idx.stride(0), V, k, p);
  MINIDL_CUDA_LAUNCH_CHECK();
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t(V) >> end_bit) != 0) ++end_bit;  // keys are <= V
  size_t bytes = 0;
  MINIDL_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, bytes, k, k + N, p, p + N, N, 0, end_bit, stream));
  Tensor temp = empty({int64_t(bytes) + 1}, kUInt8, dev);
  MINIDL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), bytes, k, k + N, p, p + N, N,
                                                    0, end_bit, stream));
  const Tensor g = native::reshape(grad_out, {N, D});
  const int threads = D >= 256 ? 256 : int((D + 31) / 32 * 32);
  const unsigned blocks = unsigned(N < (int64_t(1) << 20) ? N : (int64_t(1) << 20));
  dispatch_numeric(grad_weight.dtype(), "embedding_backward", [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) {  // bool: rejected by dispatch_numeric
      embedding_sum_kernel<T><<<blocks, threads, 0, stream>>>(
          N, D, k + N, p + N, g.data_ptr<T>(), g.stride(0), g.stride(1), grad_weight.data_ptr<T>(),
          ws0, ws1, V, padding_idx, accumulate);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace

void register_index_kernels() {
  register_kernel<Op::embedding>(DeviceType::cuda, embedding_kernel);
  register_kernel<Op::embedding_backward>(DeviceType::cuda, embedding_backward_kernel);
  register_kernel<Op::index_select>(DeviceType::cuda, index_select_kernel);
  register_kernel<Op::gather>(DeviceType::cuda, gather_kernel);
  register_kernel<Op::scatter_add>(DeviceType::cuda, scatter_add_kernel);
  register_topk_kernel();
}

}  // namespace minidl::cuda
