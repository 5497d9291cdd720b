// CUDA scaled_dot_product_attention: flash-attention forward saving only out and the
// log-sum-exp: bf16/f16 with head dims multiple of 16 on tensor cores (WMMA, f32 accumulation),
// else one warp per query row with FMA; backward recomputes the probabilities (FMA, dK/dV with
// atomics in f32/f64).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>

#include "tensor/cuda.h"
#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace minidl::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 4;     // query rows per block (one warp each)
constexpr int kMaxDim = 128;  // head dims E, Ev supported here (4 values per lane)
constexpr int kPer = kMaxDim / 32;

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

// Everything a kernel needs besides the tensors (see SdpaParams in tensor/dispatch.h).
template <typename A>
struct Args {
  int64_t BH, L, S, E, Ev;
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

template <typename A>
Args<A> make_args(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaParams& p) {
  Args<A> a{};
  a.BH = q.size(0), a.L = q.size(1), a.E = q.size(2), a.S = k.size(1), a.Ev = v.size(2);
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

template <typename A>
__device__ inline A drop_factor(const Args<A>& a, int64_t bh, int64_t i, int64_t j) {
  const PhiloxStream st{a.seed, a.offset};
  const uint64_t idx = uint64_t((bh * a.L + i) * a.S + j);
  return uint64_t(st.word(idx)) < a.threshold ? a.keep_scale : A(0);
}

template <typename T, typename A>
__global__ void sdpa_forward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                    const T* __restrict__ v, T* __restrict__ out,
                                    A* __restrict__ lse, Args<A> a) {
  __shared__ A qsh[kWarps][kMaxDim];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;  // over BH*L
  if (row >= a.BH * a.L) return;  // whole warps only; no block-wide sync below
  const int64_t bh = row / a.L, i = row % a.L;
  A* qs = qsh[warp];
  for (int64_t e = lane; e < a.E; e += 32) qs[e] = to_op(q[row * a.E + e]) * a.scale;
  __syncwarp();
  const T* kb = k + bh * a.S * a.E;
  const T* vb = v + bh * a.S * a.Ev;
  A acc[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) acc[x] = 0;
  A m = -INFINITY, l = 0;
  const int64_t kend = a.causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
  for (int64_t j0 = 0; j0 < kend; j0 += 32) {
    const int64_t j = j0 + lane;
    A s = -INFINITY;
    if (j < kend) {
      A d = 0;
      for (int64_t e = 0; e < a.E; ++e) d += qs[e] * to_op(kb[j * a.E + e]);
      s = masked(a, d, bh, i, j);
    }
    const A mnew = fmax(m, warp_max(s));
    A p = 0, alpha = 1;
    if (mnew != A(-INFINITY)) {
      p = dexp(s - mnew);
      alpha = dexp(m - mnew);
    }
    l = l * alpha + warp_sum(p);
    if (a.dropout && j < kend) p *= drop_factor(a, bh, i, j);
#pragma unroll
    for (int x = 0; x < kPer; ++x) acc[x] *= alpha;
    const int nj = int(kend - j0 < 32 ? kend - j0 : 32);
    for (int jj = 0; jj < nj; ++jj) {
      const A pj = __shfl_sync(kFull, p, jj);
      if (pj == A(0)) continue;  // uniform over the warp
      const T* vr = vb + (j0 + jj) * a.Ev;
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int64_t e = lane + 32 * x;
        if (e < a.Ev) acc[x] += pj * to_op(vr[e]);
      }
    }
    m = mnew;
  }
  const A inv = l > 0 ? A(1) / l : A(0);
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int64_t e = lane + 32 * x;
    if (e < a.Ev) out[row * a.Ev + e] = from_op<T>(acc[x] * inv);
  }
  if (lane == 0) lse[row] = l > 0 ? m + dlog(l) : A(INFINITY);
}

// One warp per query row: dQ of the row directly, dK/dV atomically into A workspaces.
template <typename T, typename A>
__global__ void sdpa_backward_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                     const T* __restrict__ k, const T* __restrict__ v,
                                     const T* __restrict__ o, const A* __restrict__ lse,
                                     T* __restrict__ gq, A* __restrict__ dk, A* __restrict__ dv,
                                     Args<A> a) {
  __shared__ A qsh[kWarps][kMaxDim];
  __shared__ A dosh[kWarps][kMaxDim];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= a.BH * a.L) return;
  const int64_t bh = row / a.L, i = row % a.L;
  A* qs = qsh[warp];
  A* dos = dosh[warp];
  for (int64_t e = lane; e < a.E; e += 32) qs[e] = to_op(q[row * a.E + e]);
  A dpart = 0;
  for (int64_t e = lane; e < a.Ev; e += 32) {
    dos[e] = to_op(g[row * a.Ev + e]);
    dpart += dos[e] * to_op(o[row * a.Ev + e]);
  }
  const A D = warp_sum(dpart);  // rowsum(dO * O)
  __syncwarp();
  const A li = lse[row];
  const T* kb = k + bh * a.S * a.E;
  const T* vb = v + bh * a.S * a.Ev;
  A dq[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) dq[x] = 0;
  const int64_t kend = a.causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
  for (int64_t j0 = 0; j0 < kend; j0 += 32) {
    const int64_t j = j0 + lane;
    A ds = 0, pz = 0;
    if (j < kend) {
      A s = 0, dp = 0;
      for (int64_t e = 0; e < a.E; ++e) s += qs[e] * to_op(kb[j * a.E + e]);
      for (int64_t e = 0; e < a.Ev; ++e) dp += dos[e] * to_op(vb[j * a.Ev + e]);
      s = masked(a, s * a.scale, bh, i, j);
      const A p = s == A(-INFINITY) ? A(0) : dexp(s - li);
      const A z = a.dropout ? drop_factor(a, bh, i, j) : A(1);
      pz = p * z;
      ds = p * (dp * z - D);
    }
    const int nj = int(kend - j0 < 32 ? kend - j0 : 32);
    for (int jj = 0; jj < nj; ++jj) {
      const A dsj = __shfl_sync(kFull, ds, jj), pzj = __shfl_sync(kFull, pz, jj);
      const int64_t jr = bh * a.S + j0 + jj;
      if (dsj != A(0)) {
#pragma unroll
        for (int x = 0; x < kPer; ++x) {
          const int64_t e = lane + 32 * x;
          if (e < a.E) {
            dq[x] += dsj * to_op(kb[(j0 + jj) * a.E + e]);
            atomicAdd(dk + jr * a.E + e, a.scale * dsj * qs[e]);
          }
        }
      }
      if (pzj != A(0))
        for (int64_t e = lane; e < a.Ev; e += 32) atomicAdd(dv + jr * a.Ev + e, pzj * dos[e]);
    }
  }
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int64_t e = lane + 32 * x;
    if (e < a.E) gq[row * a.E + e] = from_op<T>(dq[x] * a.scale);
  }
}

// ---- tensor-core forward (bf16/f16, E and Ev multiples of 16, <= 128): a block of 4 warps
// owns 64 query rows (16 per warp); per 64-key tile: S = Q K^T (WMMA), online softmax per row
// in f32 (S, running max/sum and the O accumulator live in shared memory), O += P V (WMMA).
template <typename T>
struct Wmma;
template <>
struct Wmma<Half> {
  using type = __half;
  __device__ static type from(float x) { return __float2half(x); }
};
template <>
struct Wmma<BFloat16> {
  using type = __nv_bfloat16;
  __device__ static type from(float x) { return __float2bfloat16(x); }
};

constexpr int kTile = 64;  // query rows per block and keys per tile
constexpr int kTcWarps = 4;

size_t wmma_smem_bytes(int64_t E, int64_t Ev) {
  return size_t(2 * (kTile * E + kTile * E + kTile * Ev + kTile * kTile) +
                4 * (kTile * kTile + kTile * Ev + 2 * kTile));
}

template <typename T>
__global__ void __launch_bounds__(kTcWarps * 32)
    sdpa_forward_wmma_kernel(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse,
                             Args<float> a) {
  namespace wm = nvcuda::wmma;
  using W = typename Wmma<T>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  const int E = int(a.E), Ev = int(a.Ev);
  W* Qs = reinterpret_cast<W*>(smem);                        // [64][E]
  W* Ks = Qs + kTile * E;                                    // [64][E]
  W* Vs = Ks + kTile * E;                                    // [64][Ev]
  W* Ps = Vs + kTile * Ev;                                   // [64][64]
  float* Ss = reinterpret_cast<float*>(Ps + kTile * kTile);  // [64][64]
  float* Os = Ss + kTile * kTile;                            // [64][Ev]
  float* Ms = Os + kTile * Ev;                               // [64]
  float* Ls = Ms + kTile;                                    // [64]
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t nqt = (a.L + kTile - 1) / kTile;
  const int64_t bh = blockIdx.x / nqt, i0 = (blockIdx.x % nqt) * kTile;
  const uint16_t* qbits = reinterpret_cast<const uint16_t*>(q) + bh * a.L * E;
  const uint16_t* kbits = reinterpret_cast<const uint16_t*>(k) + bh * a.S * E;
  const uint16_t* vbits = reinterpret_cast<const uint16_t*>(v) + bh * a.S * Ev;
  uint16_t* Qb = reinterpret_cast<uint16_t*>(Qs);
  uint16_t* Kb = reinterpret_cast<uint16_t*>(Ks);
  uint16_t* Vb = reinterpret_cast<uint16_t*>(Vs);
  for (int x = tid; x < kTile * E; x += kTcWarps * 32) {
    const int64_t i = i0 + x / E;
    Qb[x] = i < a.L ? qbits[i * E + x % E] : uint16_t(0);
  }
  for (int x = tid; x < kTile * Ev; x += kTcWarps * 32) Os[x] = 0.f;
  for (int x = tid; x < kTile; x += kTcWarps * 32) {
    Ms[x] = -INFINITY;
    Ls[x] = 0.f;
  }
  __syncthreads();  // Q, O, Ms, Ls initialised (also when there is no key tile)
  W* Pw = Ps + warp * 16 * kTile;
  float* Sw = Ss + warp * 16 * kTile;
  float* Ow = Os + warp * 16 * Ev;
  const W* Qw = Qs + warp * 16 * E;
  const int64_t kend = a.causal ? (i0 + kTile < a.S ? i0 + kTile : a.S) : a.S;
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();  // the previous tile's K/V are no longer read
    for (int x = tid; x < kTile * E; x += kTcWarps * 32) {
      const int64_t j = j0 + x / E;
      Kb[x] = j < a.S ? kbits[j * E + x % E] : uint16_t(0);
    }
    for (int x = tid; x < kTile * Ev; x += kTcWarps * 32) {
      const int64_t j = j0 + x / Ev;
      Vb[x] = j < a.S ? vbits[j * Ev + x % Ev] : uint16_t(0);
    }
    __syncthreads();
    for (int nt = 0; nt < kTile / 16; ++nt) {  // S_w = Q_w K^T
      wm::fragment<wm::accumulator, 16, 16, 16, float> c;
      wm::fill_fragment(c, 0.f);
      for (int kk = 0; kk < E / 16; ++kk) {
        wm::fragment<wm::matrix_a, 16, 16, 16, W, wm::row_major> fa;
        wm::fragment<wm::matrix_b, 16, 16, 16, W, wm::col_major> fb;
        wm::load_matrix_sync(fa, Qw + kk * 16, E);
        wm::load_matrix_sync(fb, Ks + nt * 16 * E + kk * 16, E);
        wm::mma_sync(c, fa, fb, c);
      }
      wm::store_matrix_sync(Sw + nt * 16, c, kTile, wm::mem_row_major);
    }
    __syncwarp();
    for (int r = 0; r < 16; ++r) {  // online softmax of row r; P_w in half, O_w rescaled
      const int64_t i = i0 + warp * 16 + r;
      float s[2], p[2];
      for (int h = 0; h < 2; ++h) {
        const int c = lane + 32 * h;
        const int64_t j = j0 + c;
        s[h] = (i < a.L && j < kend) ? masked(a, Sw[r * kTile + c] * a.scale, bh, i, j) : -INFINITY;
      }
      const float mold = Ms[warp * 16 + r];
      const float mnew = fmaxf(mold, warp_max(fmaxf(s[0], s[1])));
      float alpha = 1.f;
      p[0] = p[1] = 0.f;
      if (mnew != -INFINITY) {
        p[0] = expf(s[0] - mnew);
        p[1] = expf(s[1] - mnew);
        alpha = expf(mold - mnew);
      }
      const float rs = warp_sum(p[0] + p[1]);
      for (int h = 0; h < 2; ++h) {
        const int c = lane + 32 * h;
        if (a.dropout && p[h] != 0.f) p[h] *= drop_factor(a, bh, i, j0 + c);
        Pw[r * kTile + c] = Wmma<T>::from(p[h]);
      }
      for (int e = lane; e < Ev; e += 32) Ow[r * Ev + e] *= alpha;
      __syncwarp();  // every lane has read Ms/Ls of row r
      if (lane == 0) {
        Ls[warp * 16 + r] = Ls[warp * 16 + r] * alpha + rs;
        Ms[warp * 16 + r] = mnew;
      }
    }
    __syncwarp();
    for (int nt = 0; nt < Ev / 16; ++nt) {  // O_w += P_w V
      wm::fragment<wm::accumulator, 16, 16, 16, float> c;
      wm::load_matrix_sync(c, Ow + nt * 16, Ev, wm::mem_row_major);
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wm::fragment<wm::matrix_a, 16, 16, 16, W, wm::row_major> fa;
        wm::fragment<wm::matrix_b, 16, 16, 16, W, wm::row_major> fb;
        wm::load_matrix_sync(fa, Pw + kk * 16, kTile);
        wm::load_matrix_sync(fb, Vs + kk * 16 * Ev + nt * 16, Ev);
        wm::mma_sync(c, fa, fb, c);
      }
      wm::store_matrix_sync(Ow + nt * 16, c, Ev, wm::mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    const int64_t i = i0 + warp * 16 + r;
    if (i >= a.L) break;
    const float l = Ls[warp * 16 + r];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    for (int e = lane; e < Ev; e += 32)
      out[(bh * a.L + i) * Ev + e] = from_op<T>(Ow[r * Ev + e] * inv);
    if (lane == 0) lse[bh * a.L + i] = l > 0.f ? Ms[warp * 16 + r] + logf(l) : INFINITY;
  }
}

template <typename T, typename A>
__global__ void cast_kernel(const A* __restrict__ in, T* __restrict__ out, int64_t n) {
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n;
       x += int64_t(gridDim.x) * blockDim.x)
    out[x] = from_op<T>(in[x]);
}

void check_dims(const Tensor& q, const Tensor& v, std::string_view op) {
  MINIDL_CHECK(q.size(2) <= kMaxDim && v.size(2) <= kMaxDim, "op `", op,
               "`: the CUDA kernel supports head dims up to ", kMaxDim, ", got q ", q.shape_str(),
               " and v ", v.shape_str());
}

// Largest dynamic shared memory one block may opt in to on `device`: 227 KiB on sm_90, 163 KiB
// on sm_80, but 99 KiB on sm_86 / sm_89 / sm_120 (A10, L4, L40S, RTX 30/40/50), which the
// sm_80 binary also runs on.
size_t smem_optin(int device) {
  int v = 0;
  MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(v);
}

// The dropout stream is (seed, offset) by value, fixed when a graph is captured: every replay
// would reuse the capture's mask (and not advance the generator). Refused until the kernels
// read a replay-refreshed Philox slot (tensor/cuda/graph_rng.cuh).
void check_dropout_not_captured(const SdpaParams& p, const Tensor& q, std::string_view op) {
  MINIDL_CHECK(p.dropout_p == 0 || !is_capturing(q.device().index), "op `", op,
               "`: dropout_p > 0 (got ", p.dropout_p, ") cannot be captured in a CUDA graph: ",
               "every replay would draw the captured dropout mask again; capture with ",
               "dropout_p = 0 (eval) or run this op eagerly");
}

void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
             const SdpaParams& p) {
  check_dims(q, v, "scaled_dot_product_attention");
  check_dropout_not_captured(p, q, "scaled_dot_product_attention");
  TensorDeviceGuard guard(q);
  dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using A = acc_t<T>;
    const Args<A> a = make_args<A>(q, k, v, p);
    const int64_t rows = a.BH * a.L;
    if (rows == 0) return;
    if constexpr (is_reduced_float_v<T>) {
      // tensor cores, where the tiles fit: E = Ev = 128 needs 104.5 KiB of shared memory, more
      // than sm_86 / sm_89 allow (cudaFuncSetAttribute would fail): FMA kernel there
      const size_t smem = wmma_smem_bytes(a.E, a.Ev);
      if (a.E % 16 == 0 && a.Ev % 16 == 0 && smem <= smem_optin(q.device().index)) {
        MINIDL_CUDA_CHECK(cudaFuncSetAttribute(
            sdpa_forward_wmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        const unsigned tiles = unsigned(a.BH * ((a.L + kTile - 1) / kTile));
        sdpa_forward_wmma_kernel<T><<<tiles, kTcWarps * 32, smem, stream_of(q)>>>(
            ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), ptr<float>(lse), a);
        MINIDL_CUDA_LAUNCH_CHECK();
        return;
      }
    }
    const unsigned blocks = unsigned((rows + kWarps - 1) / kWarps);
    sdpa_forward_kernel<T, A><<<blocks, kWarps * 32, 0, stream_of(q)>>>(
        ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), ptr<A>(lse), a);
    MINIDL_CUDA_LAUNCH_CHECK();
  });
}

void backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
              const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv, const SdpaParams& p) {
  check_dims(q, v, "scaled_dot_product_attention_backward");
  check_dropout_not_captured(p, q, "scaled_dot_product_attention_backward");
  TensorDeviceGuard guard(q);
  dispatch_floating(q.dtype(), "scaled_dot_product_attention_backward", [&]<typename T>() {
    using A = acc_t<T>;
    const Args<A> a = make_args<A>(q, k, v, p);
    const DType adt = std::is_same_v<A, double> ? kFloat64 : kFloat32;
    Tensor dk = empty(gk.shape(), adt, q.device());
    Tensor dv = empty(gv.shape(), adt, q.device());
    cudaStream_t st = stream_of(q);
    // (S == 0 or E == 0 leaves dk / dv empty, with null data: no memset then)
    if (dk.numel() > 0) MINIDL_CUDA_CHECK(cudaMemsetAsync(dk.data_ptr(), 0, dk.nbytes(), st));
    if (dv.numel() > 0) MINIDL_CUDA_CHECK(cudaMemsetAsync(dv.data_ptr(), 0, dv.nbytes(), st));
    const int64_t rows = a.BH * a.L;
    if (rows > 0) {
      const unsigned blocks = unsigned((rows + kWarps - 1) / kWarps);
      sdpa_backward_kernel<T, A>
          <<<blocks, kWarps * 32, 0, st>>>(ptr<T>(g), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(o),
                                           ptr<A>(lse), ptr<T>(gq), ptr<A>(dk), ptr<A>(dv), a);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
    if (dk.numel() > 0) {
      cast_kernel<T, A>
          <<<grid_for(dk.numel()), kBlock, 0, st>>>(ptr<A>(dk), ptr<T>(gk), dk.numel());
      MINIDL_CUDA_LAUNCH_CHECK();
    }
    if (dv.numel() > 0) {
      cast_kernel<T, A>
          <<<grid_for(dv.numel()), kBlock, 0, st>>>(ptr<A>(dv), ptr<T>(gv), dv.numel());
      MINIDL_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace

void register_attention_kernels() {
  register_kernel<Op::scaled_dot_product_attention>(DeviceType::cuda, forward);
  register_kernel<Op::scaled_dot_product_attention_backward>(DeviceType::cuda, backward);
}

}  // namespace minidl::cuda
