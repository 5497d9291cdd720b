// CUDA scaled_dot_product_attention, shared by attention.cu (FMA kernels, host dispatch) and
// attention_wmma.cu (tensor-core forward): the kernels' arguments, the mask / causal rule, the
// dropout factors (the Philox stream of dropout_mask) and warp reductions.
#pragma once
#include <cmath>
#include <type_traits>

#include "tensor/attention_layout.h"
#include "tensor/cuda/runtime/common.cuh"
#include "tensor/dispatch.h"
#include "tensor/random.h"

namespace minidl::cuda::attention_detail {

inline constexpr unsigned kFull = 0xffffffffu;
inline constexpr int kMaxDim = 128;  // head dims E, Ev supported by the kernels

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A>
__device__ inline A dexp(A x) {
  if constexpr (std::is_same_v<A, float>)
    return expf(x);
  else
    return ::exp(x);
}
template <typename A>
__device__ inline A dlog(A x) {
  if constexpr (std::is_same_v<A, float>)
    return logf(x);
  else
    return ::log(x);
}
template <typename A>
__device__ inline A warp_max(A v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = fmax(v, __shfl_xor_sync(kFull, v, d));
  return v;
}
template <typename A>
__device__ inline A warp_sum(A v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kFull, v, d);
  return v;
}

// Everything a kernel needs besides the tensors (see SdpaParams in tensor/dispatch.h). Element
// (bh, i, x) of q is q[lq.offset(bh) + i * lq.row_stride + x], and so on: l{q,k,v} the inputs,
// lo out (forward) or the saved out (backward), lg grad_out, lg{q,k,v} the gradients; lse and
// the kernels' own scratch are contiguous [BH, L].
template <typename A>
struct Args {
  int64_t BH, L, S, E, Ev;
  HeadLayout lq, lk, lv, lo, lg, lgq, lgk, lgv;
  A scale;
  bool causal;
  const bool* mb;  // bool mask (true = takes part) or nullptr
  const A* mf;     // floating mask (added) or nullptr
  const int64_t* offs;
  int64_t sl, ss;
  uint64_t seed, offset, threshold;  // dropout: keep when word < threshold
  A keep_scale;
  bool dropout;
};

// q:[BH,L,E] k:[BH,S,E] v:[BH,S,Ev], or [B,H,n,d] head views (HeadLayout); the callers fill
// the other layouts.
template <typename A>
Args<A> make_args(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaParams& p) {
  Args<A> a{};
  a.BH = head_count(q), a.L = q.size(-2), a.E = q.size(-1), a.S = k.size(-2), a.Ev = v.size(-1);
  a.lq = head_layout(q), a.lk = head_layout(k), a.lv = head_layout(v);
  a.scale = A(p.scale);
  a.causal = p.is_causal;
  if (p.mask.defined()) {
    a.offs = p.mask_offsets.data_ptr<int64_t>();
    if (p.mask.dtype() == kBool)
      a.mb = p.mask.data_ptr<bool>();
    else
      a.mf = p.mask.data_ptr<A>();
    a.sl = p.mask_stride_l, a.ss = p.mask_stride_s;
  }
  a.dropout = p.dropout_p > 0;
  if (a.dropout) {
    a.seed = p.seed, a.offset = p.offset;
    a.threshold = uint64_t(std::ceil((1.0 - p.dropout_p) * 4294967296.0));
    a.keep_scale = p.dropout_p < 1 ? A(1.0 / (1.0 - p.dropout_p)) : A(0);
  }
  return a;
}

// Masked score: -inf when key j does not take part for query i; float mask added.
template <typename A>
__device__ inline A masked(const Args<A>& a, A s, int64_t bh, int64_t i, int64_t j) {
  if (a.causal && j > i) return -INFINITY;
  if (a.mb) return a.mb[a.offs[bh] + i * a.sl + j * a.ss] ? s : A(-INFINITY);
  if (a.mf) return s + a.mf[a.offs[bh] + i * a.sl + j * a.ss];
  return s;
}

// Dropout factor of element (bh, i, j): 0 or 1 / (1 - p), word bh*L*S + i*S + j of the stream.
template <typename A>
__device__ inline A drop_factor(const Args<A>& a, int64_t bh, int64_t i, int64_t j) {
  const PhiloxStream st{a.seed, a.offset};
  const uint64_t idx = uint64_t((bh * a.L + i) * a.S + j);
  return uint64_t(st.word(idx)) < a.threshold ? a.keep_scale : A(0);
}

// Largest dynamic shared memory one block may opt in to on `device`: 227 KiB on sm_90, 163 KiB
// on sm_80, but 99 KiB on sm_86 / sm_89 / sm_120 (A10, L4, L40S, RTX 30/40/50), which the
// sm_80 binary also runs on.
inline size_t smem_optin(int device) {
  int v = 0;
  MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(v);
}

// FlashAttention-2-style forward (flash_attention.cu) for T = Half / BFloat16: queues it and
// returns true for head dims E = Ev in {64, 128} without a mask tensor or dropout, 16-byte
// aligned q/k/v rows, sm_80+, unless MINIDL_UNFUSED names flash_attention; else false (nothing
// queued). Arguments as sdpa_forward_wmma's.
template <typename T>
bool sdpa_forward_flash(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                        const Args<float>& a);

// Tensor-core forward (attention_wmma.cu) for T = Half / BFloat16: queues it and returns true
// when the head dims are multiples of 16 and its shared memory fits the device; else false
// (nothing queued: the caller runs the FMA kernel). q, k, v, out as above (a.lo set); lse:[BH,L]
// f32.
template <typename T>
bool sdpa_forward_wmma(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                       const Args<float>& a);

// FlashAttention-2-style backward (flash_attention.cu), same conditions as sdpa_forward_flash
// but head dim 64 only and o, g 16-byte aligned too: queues its dQ and dK/dV kernels and returns
// true, or returns false with nothing queued. Arguments as sdpa_backward_wmma's.
template <typename T>
bool sdpa_backward_flash(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& o, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                         const Args<float>& a);

// Tensor-core backward (attention_wmma_backward.cu), same conditions: queues its two kernels and
// returns true, or returns false with nothing queued. g, o:[BH,L,Ev]; gq, gk, gv as q, k, v (all
// layouts in a set).
template <typename T>
bool sdpa_backward_wmma(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& o, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                        const Args<float>& a);

}  // namespace minidl::cuda::attention_detail
