// CUDA scaled_dot_product_attention forward on tensor cores (WMMA) for bf16/f16 with head dims
// multiple of 16: a block of 4 warps owns 64 query rows; per 64-key tile S = Q K^T, an online
// softmax per row in f32, O += P V. Falls back (returns false) where its shared memory won't fit.
// q, k, v, out: strided head views (Args' layouts; tiles are staged through shared memory).
#include "tensor/cuda/attention_wmma.cuh"

namespace minidl::cuda::attention_detail {
namespace {

size_t wmma_smem_bytes(int64_t E, int64_t Ev) {
  return size_t(2 * (kTile * E + kTile * E + kTile * Ev + kTile * kTile) +
                4 * (kTile * kTile + kTile * Ev + 2 * kTile));
}

// A block per 64 query rows of one batch-head, 16 per warp: per 64-key tile, S = Q K^T
// (WMMA), the online softmax of each row in f32 (S, running max / sum and the O accumulator live
// in shared memory), O += P V (WMMA).
template <typename T>
__global__ void __launch_bounds__(kTcThreads)
    sdpa_forward_wmma_kernel(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse,
                             Args<float> a) {
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
  const uint16_t* qbits = reinterpret_cast<const uint16_t*>(q) + a.lq.offset(bh);
  const uint16_t* kbits = reinterpret_cast<const uint16_t*>(k) + a.lk.offset(bh);
  const uint16_t* vbits = reinterpret_cast<const uint16_t*>(v) + a.lv.offset(bh);
  uint16_t* Qb = reinterpret_cast<uint16_t*>(Qs);
  uint16_t* Kb = reinterpret_cast<uint16_t*>(Ks);
  uint16_t* Vb = reinterpret_cast<uint16_t*>(Vs);
  load_tile(Qb, qbits, i0, a.L, E, a.lq.row_stride);
  for (int x = tid; x < kTile * Ev; x += kTcThreads) Os[x] = 0.f;
  for (int x = tid; x < kTile; x += kTcThreads) {
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
    load_tile(Kb, kbits, j0, a.S, E, a.lk.row_stride);
    load_tile(Vb, vbits, j0, a.S, Ev, a.lv.row_stride);
    __syncthreads();
    warp_abt(Sw, Qw, E, Ks, E, E);  // S_w = Q_w K^T
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
    warp_acc_ab(Ow, Pw, Vs, Ev);  // O_w += P_w V
    __syncwarp();
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    const int64_t i = i0 + warp * 16 + r;
    if (i >= a.L) break;
    const float l = Ls[warp * 16 + r];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    T* orow = out + a.lo.offset(bh) + i * a.lo.row_stride;
    for (int e = lane; e < Ev; e += 32) orow[e] = from_op<T>(Ow[r * Ev + e] * inv);
    if (lane == 0) lse[bh * a.L + i] = l > 0.f ? Ms[warp * 16 + r] + logf(l) : INFINITY;
  }
}

}  // namespace

template <typename T>
bool sdpa_forward_wmma(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                       const Args<float>& a) {
  if (a.E % 16 != 0 || a.Ev % 16 != 0) return false;
  // E = Ev = 128 needs 104.5 KiB: more than sm_86/89 allow (cudaFuncSetAttribute would fail)
  const size_t smem = wmma_smem_bytes(a.E, a.Ev);
  if (smem > smem_optin(q.device().index)) return false;
  MINIDL_CUDA_CHECK(cudaFuncSetAttribute(sdpa_forward_wmma_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const unsigned tiles = unsigned(a.BH * ((a.L + kTile - 1) / kTile));
  sdpa_forward_wmma_kernel<T><<<tiles, kTcThreads, smem, stream_of(q)>>>(
      ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), ptr<float>(lse), a);
  MINIDL_CUDA_LAUNCH_CHECK();
  return true;
}

template bool sdpa_forward_wmma<Half>(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                      const Args<float>&);
template bool sdpa_forward_wmma<BFloat16>(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                          Tensor&, const Args<float>&);

}  // namespace minidl::cuda::attention_detail
