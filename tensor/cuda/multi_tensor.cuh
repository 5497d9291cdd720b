// PyTorch's multi_tensor_apply for lists of tensors (fused optimizer steps in optim.cu, the
// AMP unscale in amp.cu): the pointers and sizes of up to 48 (36 for 4-5 lists) tensors and a
// table of up to 320 (tensor, chunk) blocks travel in the kernel's argument struct.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/ops.h"

namespace minidl::cuda::mta {

constexpr int kChunk = 65536;  // elements per block
constexpr int kILP = 4;        // elements per thread per iteration
constexpr int kThreads = 512;
constexpr int kMaxBlocks = 320;

// Kernel argument: Depth lists (params, grads, state...) of up to kMaxTensors tensors and the
// (tensor, chunk) of each block. Stays below the classic 4 KiB kernel-parameter limit.
template <int Depth>
struct TensorListArgs {
  static constexpr int kMaxTensors = Depth <= 3 ? 48 : 36;
  void* ptr[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  const double* step[kMaxTensors];  // Adam: the tensor's (already incremented) step count
  uint8_t first[kMaxTensors];       // SGD: momentum buffer is initialised by this step
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(TensorListArgs<5>) <= 4096 && sizeof(TensorListArgs<3>) <= 4096);

// IEEE round-to-nearest arithmetic that nvcc never contracts into an FMA, so f32/f64 results
// equal the CPU's op-by-op results (one rounding per tensor op).
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float add_rn(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ double add_rn(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ __forceinline__ float div_rn(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double div_rn(double a, double b) {
  return __ddiv_rn(a, b);
}
__device__ __forceinline__ float sqrt_rn(float a) {
  return __fsqrt_rn(a);
}
__device__ __forceinline__ double sqrt_rn(double a) {
  return __dsqrt_rn(a);
}

template <typename T>
struct alignas(sizeof(T) * kILP) Vec {
  T v[kILP];
};

// Runs op on this block's chunk: r[d][k] holds element k of list d in opmath; every list but
// the grads (list 1) is written back. 16-byte style vector loads when all lists are aligned.
template <typename T, int Depth, typename Op>
__device__ __forceinline__ void chunk_apply(const TensorListArgs<Depth>& a, const Op& op) {
  using C = opmath_t<T>;
  const int ti = a.block_tensor[blockIdx.x];
  const int64_t start = int64_t(a.block_chunk[blockIdx.x]) * kChunk;
  const int64_t rest = a.numel[ti] - start;
  const int len = int(rest < kChunk ? rest : kChunk);
  T* p[Depth];
  bool aligned = true;
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    p[d] = static_cast<T*>(a.ptr[d][ti]) + start;
    aligned = aligned && reinterpret_cast<uintptr_t>(p[d]) % sizeof(Vec<T>) == 0;
  }
  C r[Depth][kILP] = {};
  if (aligned) {
    const int nvec = len / kILP;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
#pragma unroll
      for (int d = 0; d < Depth; ++d) {
        const Vec<T> x = reinterpret_cast<const Vec<T>*>(p[d])[v];
#pragma unroll
        for (int k = 0; k < kILP; ++k) r[d][k] = to_op(x.v[k]);
      }
      op(r);
#pragma unroll
      for (int d = 0; d < Depth; ++d) {
        if (d == 1) continue;
        Vec<T> x;
#pragma unroll
        for (int k = 0; k < kILP; ++k) x.v[k] = from_op<T>(r[d][k]);
        reinterpret_cast<Vec<T>*>(p[d])[v] = x;
      }
    }
    for (int i = nvec * kILP + threadIdx.x; i < len; i += blockDim.x) {  // < kILP tail elements
#pragma unroll
      for (int d = 0; d < Depth; ++d) {  // lanes 1.. zero, not the last vector's values (an op
        r[d][0] = to_op(p[d][i]);        // that checks every lane, AMP's unscale, reads them)
#pragma unroll
        for (int k = 1; k < kILP; ++k) r[d][k] = C(0);
      }
      op(r);
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (d != 1) p[d][i] = from_op<T>(r[d][0]);
    }
    return;
  }
  for (int base = 0; base < len; base += blockDim.x * kILP) {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const int i = base + threadIdx.x + k * blockDim.x;
#pragma unroll
      for (int d = 0; d < Depth; ++d) r[d][k] = i < len ? to_op(p[d][i]) : C(0);
    }
    op(r);
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const int i = base + threadIdx.x + k * blockDim.x;
      if (i >= len) continue;
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (d != 1) p[d][i] = from_op<T>(r[d][k]);
    }
  }
}

// Packs lists[d][i] (tensors with numel > 0) into TensorListArgs and calls launch(args, blocks)
// whenever the tensor or block table is full, and once at the end.
template <int Depth, typename Launch>
void multi_tensor_apply(const std::array<const std::vector<Tensor>*, Depth>& lists,
                        const std::vector<Tensor>* steps, const std::vector<uint8_t>* first,
                        Launch launch) {
  using Args = TensorListArgs<Depth>;
  Args a{};
  int nt = 0, nb = 0;
  const std::vector<Tensor>& params = *lists[0];
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t numel = params[i].numel();
    if (numel == 0) continue;
    for (int d = 0; d < Depth; ++d) a.ptr[d][nt] = (*lists[d])[i].data_ptr();
    a.numel[nt] = numel;
    a.step[nt] = steps ? static_cast<const double*>((*steps)[i].data_ptr()) : nullptr;
    a.first[nt] = first ? (*first)[i] : 0;
    ++nt;
    const int64_t chunks = (numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      a.block_tensor[nb] = uint8_t(nt - 1);
      a.block_chunk[nb] = int32_t(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb < kMaxBlocks && !(nt == Args::kMaxTensors && last_chunk)) continue;
      launch(a, nb);
      nb = 0;
      if (last_chunk) {
        nt = 0;
      } else {  // the tensor goes on in the next launch as tensor 0
        for (int d = 0; d < Depth; ++d) a.ptr[d][0] = a.ptr[d][nt - 1];
        a.numel[0] = a.numel[nt - 1];
        a.step[0] = a.step[nt - 1];
        a.first[0] = a.first[nt - 1];
        nt = 1;
      }
    }
  }
  if (nb > 0) launch(a, nb);
}

// Indices of `params` grouped by dtype (a group may mix f32 and f16 parameters).
inline std::map<DType, std::vector<size_t>> by_dtype(const std::vector<Tensor>& params) {
  std::map<DType, std::vector<size_t>> out;
  for (size_t i = 0; i < params.size(); ++i) out[params[i].dtype()].push_back(i);
  return out;
}

inline std::vector<Tensor> pick(const std::vector<Tensor>& v, const std::vector<size_t>& idx) {
  std::vector<Tensor> out;
  if (v.empty()) return out;
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

// Runs fn(tensors of one dtype, dtype) per dtype over `tensors`, strided ones replaced by
// contiguous copies that are written back afterwards when write_back (in-place list ops).
template <typename Fn>
void for_each_dtype_dense(const std::vector<Tensor>& tensors, bool write_back, Fn fn) {
  std::vector<Tensor> dense(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    dense[i] = tensors[i].is_contiguous() ? tensors[i] : native::contiguous(tensors[i]);
  for (const auto& [dt, idx] : by_dtype(dense)) fn(pick(dense, idx), dt);
  if (!write_back) return;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!dense[i].is_same(tensors[i])) {
      Tensor dst = tensors[i];
      native::copy_(dst, dense[i]);
    }
}

}  // namespace minidl::cuda::mta
