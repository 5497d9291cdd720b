// CUDA kernels of the GPT ops, mirroring tensor/cpu/scan_select.cpp: tril/triu (a thread per
// element), cumsum (a thread per line, sequential scan: the CPU's order, so results match
// exactly), div_trunc/div_floor (tensor/div_mode.h) and multinomial (a thread per row running
// tensor/random.h's multinomial_row: the same draws as the CPU for the same generator state).
#include <cstdint>
#include <type_traits>

#include "tensor/cuda/runtime/common.cuh"
#include "tensor/cuda/runtime/graph_rng.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/dispatch.h"
#include "tensor/div_mode.h"
#include "tensor/random.h"

namespace minidl::cuda {
namespace {

// Element offsets of row-major positions of a shape under strides (up to kMaxLoopDims dims).
struct Indexer {
  int nd = 0;
  int64_t size[kMaxLoopDims];
  int64_t stride[kMaxLoopDims];
  __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      off += (i % size[d]) * stride[d];
      i /= size[d];
    }
    return off;
  }
};
Indexer make_indexer(const Shape& shape, const Strides& strides, const char* op) {
  MINIDL_CHECK(shape.size() <= size_t(kMaxLoopDims), "op `", op, "`: CUDA supports at most ",
               kMaxLoopDims, " dims, got ", shape_str(shape));
  Indexer ix;
  ix.nd = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    ix.size[d] = shape[d];
    ix.stride[d] = strides[d];
  }
  return ix;
}

// ---- tril / triu: out (contiguous) element e = (batch, i, j).
template <typename B>
__global__ void tri_kernel_dev(int64_t n, int64_t R, int64_t C, Indexer batch, int64_t sr,
                               int64_t sc, const B* __restrict__ in, B* __restrict__ out,
                               int64_t diagonal, bool lower) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    const int64_t j = e % C, i = (e / C) % R, b = e / (R * C);
    const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
    out[e] = keep ? in[batch.offset(b) + i * sr + j * sc] : B(0);
  }
}
void tri(const Tensor& in, Tensor& out, int64_t diagonal, bool lower) {
  const int64_t n = out.numel(), nd = in.dim();
  if (n == 0) return;
  const Shape bs(in.shape().begin(), in.shape().end() - 2);
  const Strides bst(in.strides().begin(), in.strides().end() - 2);
  const Indexer batch = make_indexer(bs, bst, lower ? "tril" : "triu");
  TensorDeviceGuard guard(out);
  dispatch_bits(in.element_size(), [&]<typename B>() {
    tri_kernel_dev<B><<<grid_for(n), kBlock, 0, stream_of(out)>>>(
        n, in.size(-2), in.size(-1), batch, in.stride(nd - 2), in.stride(nd - 1),
        static_cast<const B*>(in.data_ptr()), static_cast<B*>(out.data_ptr()), diagonal, lower);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}
void tril_kernel(const Tensor& in, Tensor& out, int64_t diagonal) {
  tri(in, out, diagonal, true);
}
void triu_kernel(const Tensor& in, Tensor& out, int64_t diagonal) {
  tri(in, out, diagonal, false);
}

// ---- cumsum: a thread per line; accumulator scan_acc_t (float for f16/bf16, unsigned for ints).
template <typename T>
__global__ void cumsum_kernel_dev(int64_t lines, int64_t L, Indexer in_ix, Indexer out_ix,
                                  int64_t si, int64_t so, const T* __restrict__ in,
                                  T* __restrict__ out, bool reverse) {
  using A = scan_acc_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += step) {
    const T* s = in + in_ix.offset(l);
    T* o = out + out_ix.offset(l);
    A acc = A(0);
    for (int64_t k = 0; k < L; ++k) {
      const int64_t i = reverse ? L - 1 - k : k;
      acc = A(acc + A(to_op(s[i * si])));
      o[i * so] = from_op<T>(acc);
    }
  }
}
void cumsum_kernel(const Tensor& in, Tensor& out, int64_t dim, bool reverse) {
  MINIDL_CHECK(in.dtype() == out.dtype(), "op `cumsum`: internal: dtypes differ (", in.dtype(),
               " vs ", out.dtype(), ")");
  if (out.numel() == 0) return;
  const int64_t L = in.size(dim), lines = out.numel() / L;
  Shape line_shape = in.shape();
  Strides in_strides = in.strides(), out_strides = out.strides();
  line_shape.erase(line_shape.begin() + dim);
  in_strides.erase(in_strides.begin() + dim);
  out_strides.erase(out_strides.begin() + dim);
  const Indexer in_ix = make_indexer(line_shape, in_strides, "cumsum");
  const Indexer out_ix = make_indexer(line_shape, out_strides, "cumsum");
  TensorDeviceGuard guard(out);
  dispatch_numeric_types(in.dtype(), "cumsum", [&]<typename T>() {
    cumsum_kernel_dev<T><<<grid_for(lines), kBlock, 0, stream_of(out)>>>(
        lines, L, in_ix, out_ix, in.stride(dim), out.stride(dim),
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), reverse);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

// ---- rounded division
template <typename T, bool kFloor>
struct DivRounded {
  __device__ T operator()(T x, T y) const {
    const auto cx = to_op(x), cy = to_op(y);
    using C = decltype(cx);
    if constexpr (std::is_floating_point_v<C>)
      return from_op<T>(kFloor ? div_floor_float(cx, cy) : trunc(cx / cy));
    else
      return T(div_int(cx, cy, kFloor));
  }
};
template <bool kFloor>
void div_rounded(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_numeric_types(out.dtype(), kFloor ? "div_floor" : "div_trunc", [&]<typename T>() {
    launch_elementwise<T, T, T>(out, DivRounded<T, kFloor>{}, a, b);
  });
}
void div_trunc_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  div_rounded<false>(a, b, out);
}
void div_floor_kernel(const Tensor& a, const Tensor& b, Tensor& out) {
  div_rounded<true>(a, b, out);
}

// ---- multinomial: a thread per row.
__global__ void multinomial_kernel_dev(int64_t B, int64_t C, int64_t S, double* w, int64_t* out,
                                       bool replacement, PhiloxArgs args) {
  const PhiloxStream s = args.stream();
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < B; r += step)
    multinomial_row(w + r * C, C, S, replacement, s, uint64_t(r * S), out + r * S);
}
void multinomial_kernel(Tensor& w, Tensor& out, bool replacement, Generator& gen) {
  MINIDL_CHECK(w.dtype() == kFloat64 && w.is_contiguous() && out.dtype() == kInt64 &&
                   out.is_contiguous() && w.dim() == 2 && out.dim() == 2,
               "op `multinomial`: internal: expected contiguous f64 [B,C] weights and int64 "
               "[B,S] out, got ",
               w.dtype(), " ", w.shape_str(), " and ", out.dtype(), " ", out.shape_str());
  const int64_t B = w.size(0), C = w.size(1), S = out.size(1);
  if (B * S == 0) return;
  TensorDeviceGuard guard(out);
  const PhiloxArgs args =
      reserve_philox(gen, PhiloxStream::blocks64(uint64_t(B * S)), out.device().index);
  multinomial_kernel_dev<<<grid_for(B, 64), 64, 0, stream_of(out)>>>(
      B, C, S, w.data_ptr<double>(), out.data_ptr<int64_t>(), replacement, args);
  MINIDL_CUDA_LAUNCH_CHECK();
}

}  // namespace

void register_scan_select_kernels() {
  register_kernel<Op::tril>(DeviceType::cuda, tril_kernel);
  register_kernel<Op::triu>(DeviceType::cuda, triu_kernel);
  register_kernel<Op::cumsum>(DeviceType::cuda, cumsum_kernel);
  register_kernel<Op::div_trunc>(DeviceType::cuda, div_trunc_kernel);
  register_kernel<Op::div_floor>(DeviceType::cuda, div_floor_kernel);
  register_kernel<Op::multinomial>(DeviceType::cuda, multinomial_kernel);
}

}  // namespace minidl::cuda
