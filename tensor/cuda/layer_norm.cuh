// CUDA machinery shared by the layer_norm / add_layer_norm forward (norm.cu) and backward
// (norm_backward.cu) kernels: mixed-dtype packs, the row geometry and the launch over the
// register-row widths.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/norm.cuh"
#include "tensor/ops.h"

namespace minidl::cuda::norm_detail {

inline constexpr int kMaxWarpRow = 1024;  // longest row held in a warp's registers

// N elements of U loaded or stored at once: with N = Vec<T>::n, the twin of a 16-byte Vec<T>
// for an operand of another dtype (a bf16 residual beside f32 rows: 8 bytes).
template <typename U, int N>
struct alignas(sizeof(U) * N) Pack {
  U v[N];
};

// w / b (or undefined) as contiguous opmath-typed data (a copy only when dtype/layout differ).
inline Tensor param_as(const Tensor& t, DType adt) {
  if (!t.defined()) return Tensor();
  return native::contiguous(native::to(t, adt));
}
template <typename A>
const A* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const A*>(t.data_ptr()) : nullptr;
}

// Row geometry shared by forward and backward: vector count per lane (0: no register path).
// Every pointer (null ones skipped) must be 16-byte aligned.
template <typename T>
int warp_nv(int64_t D, std::initializer_list<const void*> ptrs) {
  constexpr int n = Vec<T>::n;
  if (D > kMaxWarpRow || D % n != 0) return 0;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  const int64_t need = ceil_div(D / n, 32);
  int nv = 1;
  while (nv < need) nv *= 2;
  return nv;
}

// launch.template operator()<NV>() for NV in {1, 2, 4, 8, 16} (up to the vectors a 1024-long
// row of T needs), then the launch check.
template <typename T, typename F>
void launch_nv(int nv, F&& launch) {
  constexpr int maxnv = kMaxWarpRow / 32 / Vec<T>::n;
  auto go = [&]<int NV>() {
    if constexpr (NV <= maxnv) launch.template operator()<NV>();
  };
  switch (nv) {
    case 1:
      go.template operator()<1>();
      break;
    case 2:
      go.template operator()<2>();
      break;
    case 4:
      go.template operator()<4>();
      break;
    case 8:
      go.template operator()<8>();
      break;
    default:
      go.template operator()<16>();
      break;
  }
  MINIDL_CUDA_LAUNCH_CHECK();
}

// Registers layer_norm_backward / add_layer_norm_backward (norm_backward.cu).
void register_layer_norm_backward_kernels();

}  // namespace minidl::cuda::norm_detail
