// CUDA glue of the FlashAttention-2-style forward and backward (flash_attention{,_backward}.cuh):
// the warp collectives as PTX (mma.sync m16n8k16, shuffles, packed conversions), the kernels and
// their launch conditions (bf16/f16, head dim 64 or 128 for q, k and v (backward: 64), no mask
// tensor, no dropout, 16-byte aligned rows, sm_80+). MINIDL_UNFUSED=flash_attention keeps the
// WMMA kernels; MINIDL_UNFUSED=flash_ldmatrix the 32-bit fragment loads and transposed tiles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "tensor/cuda/attention.cuh"
#include "tensor/cuda/flash_attention_backward.cuh"
#include "tensor/variants.h"

namespace minidl::cuda::attention_detail {
namespace {

// The Warp policy of flash::forward_block on the device, for T = Half / BFloat16.
template <typename T>
struct DeviceWarp {
  __device__ __forceinline__ void sync_block() { __syncthreads(); }
  __device__ __forceinline__ void mma(float* c, const uint32_t* a, const uint32_t* b) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, BFloat16>)
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // never launched below sm_80 (sdpa_forward_flash checks the device)
#endif
  }
  // ldmatrix (sm_75+). Volatile asm (LLVM: may read memory) stays after the block barrier that
  // published the tile, as in CUTLASS's ldsm.
  __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
  __device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
  __device__ __forceinline__ float shfl_xor(float v, int mask) {
    return __shfl_xor_sync(kFull, v, mask);
  }
  __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&h);
    } else {
      const __half2 h = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&h);
    }
  }
  __device__ __forceinline__ uint16_t to_bits(float x) {
    return T(x).bits;
  }
  __device__ __forceinline__ float from_bits(uint16_t b) {
    return float(T::from_bits(b));
  }
  __device__ __forceinline__ float exp2(float x) {
    return exp2f(x);
  }
  __device__ __forceinline__ float log(float x) {
    return logf(x);
  }
};

template <typename T, int HD, bool Ldm>
__global__ void __launch_bounds__(flash::kThreads)
    flash_forward_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                         const uint16_t* __restrict__ v, uint16_t* __restrict__ out,
                         float* __restrict__ lse, flash::ForwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceWarp<T> w;
  flash::forward_block<HD, Ldm>(a, q, k, v, out, lse, blockIdx.x, int(threadIdx.x), smem, w);
}

template <typename T, int HD, bool Ldm>
__global__ void __launch_bounds__(flash::kThreads)
    flash_backward_dq_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                             const uint16_t* __restrict__ v, const uint16_t* __restrict__ o,
                             const uint16_t* __restrict__ g, const float* __restrict__ lse,
                             uint16_t* __restrict__ gq, float* __restrict__ dsum,
                             flash::BackwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceWarp<T> w;
  flash::backward_dq_block<HD, Ldm>(a, q, k, v, o, g, lse, gq, dsum, blockIdx.x, int(threadIdx.x),
                                    smem, w);
}

template <typename T, int HD, bool Ldm>
__global__ void __launch_bounds__(flash::kThreads)
    flash_backward_dkv_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                              const uint16_t* __restrict__ v, const uint16_t* __restrict__ g,
                              const float* __restrict__ lse, const float* __restrict__ dsum,
                              uint16_t* __restrict__ gk, uint16_t* __restrict__ gv,
                              flash::BackwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceWarp<T> w;
  flash::backward_dkv_block<HD, Ldm>(a, q, k, v, g, lse, dsum, gk, gv, blockIdx.x, int(threadIdx.x),
                                     smem, w);
}

// Rows of 8-element chunks at 16-byte boundaries for every batch-head.
bool chunk_aligned(const Tensor& t, const HeadLayout& l) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && l.batch_stride % 8 == 0 &&
         l.head_stride % 8 == 0 && l.row_stride % 8 == 0;
}

int compute_major(int device) {
  int v = 0;
  MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device));
  return v;
}

template <typename T>
const uint16_t* bits(const Tensor& t) {
  return reinterpret_cast<const uint16_t*>(ptr<T>(t));
}

template <typename T>
uint16_t* out_bits(Tensor& t) {
  return reinterpret_cast<uint16_t*>(ptr<T>(t));
}

// The conditions both directions share (see sdpa_forward_flash in attention.cuh).
bool flash_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Args<float>& a) {
  if (!variants::fused("flash_attention")) return false;
  if (a.E != a.Ev || (a.E != 64 && a.E != 128) || a.mb || a.mf || a.dropout) return false;
  if (!chunk_aligned(q, a.lq) || !chunk_aligned(k, a.lk) || !chunk_aligned(v, a.lv)) return false;
  const int64_t tiles = a.BH * ((std::max(a.L, a.S) + flash::kRows - 1) / flash::kRows);
  return tiles <= int64_t(INT32_MAX) && compute_major(q.device().index) >= 8;
}

void fill_forward_args(flash::ForwardArgs& fa, const Args<float>& a) {
  fa.BH = a.BH, fa.L = a.L, fa.S = a.S;
  fa.lq = a.lq, fa.lk = a.lk, fa.lv = a.lv, fa.lo = a.lo;
  fa.scale_log2 = a.scale * flash::kLog2e;
  fa.causal = a.causal;
}

template <typename T, int HD>
void launch(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
            const flash::ForwardArgs& fa) {
  constexpr size_t smem = flash::forward_smem_bytes<HD>();
  static_assert(smem <= 48 * 1024, "no opt-in needed");
  const int64_t blocks = fa.BH * ((fa.L + flash::kRows - 1) / flash::kRows);
  auto kernel = variants::fused("flash_ldmatrix") ? flash_forward_kernel<T, HD, true>
                                                  : flash_forward_kernel<T, HD, false>;
  kernel<<<unsigned(blocks), flash::kThreads, smem, stream_of(q)>>>(
      bits<T>(q), bits<T>(k), bits<T>(v), out_bits<T>(out), ptr<float>(lse), fa);
  MINIDL_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
bool sdpa_forward_flash(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                        const Args<float>& a) {
  if (!flash_applies(q, k, v, a)) return false;
  flash::ForwardArgs fa;
  fill_forward_args(fa, a);
  if (a.E == 64)
    launch<T, 64>(q, k, v, out, lse, fa);
  else
    launch<T, 128>(q, k, v, out, lse, fa);
  return true;
}

template <typename T>
bool sdpa_backward_flash(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& o, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                         const Args<float>& a) {
  if (a.E != 64 || !flash_applies(q, k, v, a)) return false;
  if (!chunk_aligned(o, a.lo) || !chunk_aligned(g, a.lg)) return false;
  flash::BackwardArgs ba;
  fill_forward_args(ba, a);
  ba.lg = a.lg, ba.lgq = a.lgq, ba.lgk = a.lgk, ba.lgv = a.lgv;
  ba.scale = a.scale;
  Tensor dsum = empty({a.BH * a.L}, kFloat32, q.device());  // D = rowsum(dO * O)
  cudaStream_t st = stream_of(q);
  constexpr size_t dq_smem = flash::backward_dq_smem_bytes<64>();
  constexpr size_t dkv_smem = flash::backward_dkv_smem_bytes<64>();
  static_assert(dq_smem <= 48 * 1024 && dkv_smem <= 48 * 1024, "no opt-in needed");
  const bool ldm = variants::fused("flash_ldmatrix");
  if (a.L > 0) {  // dQ and D first: the dK/dV pass reads D
    const int64_t blocks = a.BH * ((a.L + flash::kRows - 1) / flash::kRows);
    auto dq_kernel =
        ldm ? flash_backward_dq_kernel<T, 64, true> : flash_backward_dq_kernel<T, 64, false>;
    dq_kernel<<<unsigned(blocks), flash::kThreads, dq_smem, st>>>(
        bits<T>(q), bits<T>(k), bits<T>(v), bits<T>(o), bits<T>(g), ptr<float>(lse),
        out_bits<T>(gq), ptr<float>(dsum), ba);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
  if (a.S > 0) {
    const int64_t blocks = a.BH * ((a.S + flash::kRows - 1) / flash::kRows);
    auto dkv_kernel =
        ldm ? flash_backward_dkv_kernel<T, 64, true> : flash_backward_dkv_kernel<T, 64, false>;
    dkv_kernel<<<unsigned(blocks), flash::kThreads, dkv_smem, st>>>(
        bits<T>(q), bits<T>(k), bits<T>(v), bits<T>(g), ptr<float>(lse), ptr<float>(dsum),
        out_bits<T>(gk), out_bits<T>(gv), ba);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
  return true;
}

template bool sdpa_forward_flash<Half>(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                       Tensor&, const Args<float>&);
template bool sdpa_forward_flash<BFloat16>(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                           Tensor&, const Args<float>&);

template bool sdpa_backward_flash<Half>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&,
                                        const Args<float>&);
template bool sdpa_backward_flash<BFloat16>(const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                            Tensor&, Tensor&, const Args<float>&);

}  // namespace minidl::cuda::attention_detail
