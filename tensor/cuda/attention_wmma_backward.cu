// CUDA scaled_dot_product_attention backward on tensor cores (WMMA) for bf16/f16 with head dims
// multiple of 16, flash-attention-2 style without atomics: a dQ kernel (a block per 64 query
// rows, over the key tiles) and then a dK/dV kernel (a block per 64 key rows, over the query
// tiles), both recomputing P = exp(S - lse); P and dS are rounded to T for the MMAs. All
// operands are strided head views (Args' layouts), staged through shared memory.
#include "tensor/cuda/attention_wmma.cuh"

namespace minidl::cuda::attention_detail {
namespace {

// Shared memory of each kernel: four T tiles (two [64][E], two [64][Ev]) and two [64][64] T
// tiles (P, dS; the dQ kernel uses only dS), then f32: S and dP [64][64], the accumulators and
// two [64] vectors.
size_t dq_smem_bytes(int64_t E, int64_t Ev) {
  return size_t(2 * (2 * kTile * E + 2 * kTile * Ev + kTile * kTile) +
                4 * (2 * kTile * kTile + kTile * E + 2 * kTile));
}
size_t dkv_smem_bytes(int64_t E, int64_t Ev) {
  return size_t(2 * (2 * kTile * E + 2 * kTile * Ev + 2 * kTile * kTile) +
                4 * (2 * kTile * kTile + kTile * E + kTile * Ev + 2 * kTile));
}

// P and dS of query row i and key column j from S = q.k and dP = dO.v (unscaled), the row's lse
// and D = rowsum(dO * O); outside the matrix (or masked) both are 0.
struct PdS {
  float pz, ds;
};
__device__ inline PdS p_ds(const Args<float>& a, float s, float dp, float lse, float D, int64_t bh,
                           int64_t i, int64_t j) {
  if (i >= a.L || j >= a.S) return {0.f, 0.f};
  s = masked(a, s * a.scale, bh, i, j);
  const float p = s == -INFINITY ? 0.f : expf(s - lse);
  const float z = a.dropout ? drop_factor(a, bh, i, j) : 1.f;
  return {p * z, p * (dp * z - D)};
}

// dQ (and D): a block per 64 query rows i0.. of one batch-head, over the key tiles.
template <typename T>
__global__ void __launch_bounds__(kTcThreads)
    sdpa_backward_dq_wmma_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                 const T* __restrict__ k, const T* __restrict__ v,
                                 const T* __restrict__ o, const float* __restrict__ lse,
                                 T* __restrict__ gq, float* __restrict__ dsum, Args<float> a) {
  using W = typename Wmma<T>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  const int E = int(a.E), Ev = int(a.Ev);
  W* Qs = reinterpret_cast<W*>(smem);                         // [64][E]
  W* Ks = Qs + kTile * E;                                     // [64][E]
  W* dOs = Ks + kTile * E;                                    // [64][Ev]
  W* Vs = dOs + kTile * Ev;                                   // [64][Ev]
  W* dSs = Vs + kTile * Ev;                                   // [64][64]
  float* Ss = reinterpret_cast<float*>(dSs + kTile * kTile);  // [64][64]
  float* dPs = Ss + kTile * kTile;                            // [64][64]
  float* dQs = dPs + kTile * kTile;                           // [64][E]
  float* Lse = dQs + kTile * E;                               // [64]
  float* Ds = Lse + kTile;                                    // [64]
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t nqt = (a.L + kTile - 1) / kTile;
  const int64_t bh = blockIdx.x / nqt, i0 = (blockIdx.x % nqt) * kTile;
  load_tile(reinterpret_cast<uint16_t*>(Qs), reinterpret_cast<const uint16_t*>(q) + a.lq.offset(bh),
            i0, a.L, E, a.lq.row_stride);
  load_tile(reinterpret_cast<uint16_t*>(dOs),
            reinterpret_cast<const uint16_t*>(g) + a.lg.offset(bh), i0, a.L, Ev, a.lg.row_stride);
  for (int x = tid; x < kTile * E; x += kTcThreads) dQs[x] = 0.f;
  for (int r = warp * 16; r < warp * 16 + 16; ++r) {  // D and lse of the warp's rows
    const int64_t i = i0 + r;
    float part = 0.f;
    if (i < a.L) {
      const T* gr = g + a.lg.offset(bh) + i * a.lg.row_stride;
      const T* orow = o + a.lo.offset(bh) + i * a.lo.row_stride;
      for (int e = lane; e < Ev; e += 32) part += to_op(gr[e]) * to_op(orow[e]);
    }
    const float D = warp_sum(part);
    if (lane == 0) {
      Ds[r] = D;
      Lse[r] = i < a.L ? lse[bh * a.L + i] : INFINITY;
      if (i < a.L) dsum[bh * a.L + i] = D;
    }
  }
  __syncthreads();
  const W* Qw = Qs + warp * 16 * E;
  const W* dOw = dOs + warp * 16 * Ev;
  float* Sw = Ss + warp * 16 * kTile;
  float* dPw = dPs + warp * 16 * kTile;
  W* dSw = dSs + warp * 16 * kTile;
  const int64_t kend = a.causal ? (i0 + kTile < a.S ? i0 + kTile : a.S) : a.S;
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();  // the previous tile's K/V are no longer read
    load_tile(reinterpret_cast<uint16_t*>(Ks),
              reinterpret_cast<const uint16_t*>(k) + a.lk.offset(bh), j0, a.S, E, a.lk.row_stride);
    load_tile(reinterpret_cast<uint16_t*>(Vs),
              reinterpret_cast<const uint16_t*>(v) + a.lv.offset(bh), j0, a.S, Ev, a.lv.row_stride);
    __syncthreads();
    warp_abt(Sw, Qw, E, Ks, E, E);       // S_w = Q_w K^T
    warp_abt(dPw, dOw, Ev, Vs, Ev, Ev);  // dP_w = dO_w V^T
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int ri = warp * 16 + r;
      for (int c = lane; c < kTile; c += 32) {
        const PdS x = p_ds(a, Sw[r * kTile + c], dPw[r * kTile + c], Lse[ri], Ds[ri], bh, i0 + ri,
                           j0 + c < kend ? j0 + c : a.S);
        dSw[r * kTile + c] = Wmma<T>::from(x.ds);
      }
    }
    __syncwarp();
    warp_acc_ab(dQs + warp * 16 * E, dSw, Ks, E);  // dQ_w += dS_w K
    __syncwarp();
  }
  __syncthreads();
  for (int x = tid; x < kTile * E; x += kTcThreads) {
    const int64_t i = i0 + x / E;
    if (i < a.L) gq[a.lgq.offset(bh) + i * a.lgq.row_stride + x % E] = from_op<T>(dQs[x] * a.scale);
  }
}

// dK and dV: a block per 64 key rows j0.. of one batch-head, over the query tiles (causal: from
// the tile of row j0 on). Reads D from the dQ kernel (queued before it).
template <typename T>
__global__ void __launch_bounds__(kTcThreads)
    sdpa_backward_dkv_wmma_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                  const T* __restrict__ k, const T* __restrict__ v,
                                  const float* __restrict__ lse, const float* __restrict__ dsum,
                                  T* __restrict__ gk, T* __restrict__ gv, Args<float> a) {
  using W = typename Wmma<T>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  const int E = int(a.E), Ev = int(a.Ev);
  W* Ks = reinterpret_cast<W*>(smem);                         // [64][E]
  W* Qs = Ks + kTile * E;                                     // [64][E]
  W* Vs = Qs + kTile * E;                                     // [64][Ev]
  W* dOs = Vs + kTile * Ev;                                   // [64][Ev]
  W* Ps = dOs + kTile * Ev;                                   // [64][64] (key rows)
  W* dSs = Ps + kTile * kTile;                                // [64][64] (key rows)
  float* Ss = reinterpret_cast<float*>(dSs + kTile * kTile);  // S^T [64][64]
  float* dPs = Ss + kTile * kTile;                            // dP^T [64][64]
  float* dKs = dPs + kTile * kTile;                           // [64][E]
  float* dVs = dKs + kTile * E;                               // [64][Ev]
  float* Lse = dVs + kTile * Ev;                              // [64] of the query tile
  float* Ds = Lse + kTile;                                    // [64] of the query tile
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t nkt = (a.S + kTile - 1) / kTile;
  const int64_t bh = blockIdx.x / nkt, j0 = (blockIdx.x % nkt) * kTile;
  load_tile(reinterpret_cast<uint16_t*>(Ks), reinterpret_cast<const uint16_t*>(k) + a.lk.offset(bh),
            j0, a.S, E, a.lk.row_stride);
  load_tile(reinterpret_cast<uint16_t*>(Vs), reinterpret_cast<const uint16_t*>(v) + a.lv.offset(bh),
            j0, a.S, Ev, a.lv.row_stride);
  for (int x = tid; x < kTile * E; x += kTcThreads) dKs[x] = 0.f;
  for (int x = tid; x < kTile * Ev; x += kTcThreads) dVs[x] = 0.f;
  const W* Kw = Ks + warp * 16 * E;
  const W* Vw = Vs + warp * 16 * Ev;
  float* Sw = Ss + warp * 16 * kTile;
  float* dPw = dPs + warp * 16 * kTile;
  W* Pw = Ps + warp * 16 * kTile;
  W* dSw = dSs + warp * 16 * kTile;
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.L; i0 += kTile) {
    __syncthreads();  // the previous tile's Q/dO/lse/D are no longer read (and K/V, dK/dV set)
    load_tile(reinterpret_cast<uint16_t*>(Qs),
              reinterpret_cast<const uint16_t*>(q) + a.lq.offset(bh), i0, a.L, E, a.lq.row_stride);
    load_tile(reinterpret_cast<uint16_t*>(dOs),
              reinterpret_cast<const uint16_t*>(g) + a.lg.offset(bh), i0, a.L, Ev, a.lg.row_stride);
    for (int x = tid; x < kTile; x += kTcThreads) {
      const int64_t i = i0 + x;
      Lse[x] = i < a.L ? lse[bh * a.L + i] : INFINITY;
      Ds[x] = i < a.L ? dsum[bh * a.L + i] : 0.f;
    }
    __syncthreads();
    warp_abt(Sw, Kw, E, Qs, E, E);       // S^T_w = K_w Q^T
    warp_abt(dPw, Vw, Ev, dOs, Ev, Ev);  // dP^T_w = V_w dO^T
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int64_t j = j0 + warp * 16 + r;
      for (int c = lane; c < kTile; c += 32) {
        const PdS x = p_ds(a, Sw[r * kTile + c], dPw[r * kTile + c], Lse[c], Ds[c], bh, i0 + c, j);
        Pw[r * kTile + c] = Wmma<T>::from(x.pz);
        dSw[r * kTile + c] = Wmma<T>::from(x.ds);
      }
    }
    __syncwarp();
    warp_acc_ab(dVs + warp * 16 * Ev, Pw, dOs, Ev);  // dV_w += P_w dO
    warp_acc_ab(dKs + warp * 16 * E, dSw, Qs, E);    // dK_w += dS_w Q
    __syncwarp();
  }
  __syncthreads();
  for (int x = tid; x < kTile * E; x += kTcThreads) {
    const int64_t j = j0 + x / E;
    if (j < a.S) gk[a.lgk.offset(bh) + j * a.lgk.row_stride + x % E] = from_op<T>(dKs[x] * a.scale);
  }
  for (int x = tid; x < kTile * Ev; x += kTcThreads) {
    const int64_t j = j0 + x / Ev;
    if (j < a.S) gv[a.lgv.offset(bh) + j * a.lgv.row_stride + x % Ev] = from_op<T>(dVs[x]);
  }
}

}  // namespace

template <typename T>
bool sdpa_backward_wmma(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& o, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                        const Args<float>& a) {
  if (a.E % 16 != 0 || a.Ev % 16 != 0 || a.E == 0 || a.Ev == 0) return false;
  const size_t dq_smem = dq_smem_bytes(a.E, a.Ev), dkv_smem = dkv_smem_bytes(a.E, a.Ev);
  const size_t optin = smem_optin(q.device().index);
  if (dq_smem > optin || dkv_smem > optin) return false;
  MINIDL_CUDA_CHECK(cudaFuncSetAttribute(
      sdpa_backward_dq_wmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dq_smem)));
  MINIDL_CUDA_CHECK(cudaFuncSetAttribute(sdpa_backward_dkv_wmma_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(dkv_smem)));
  const cudaStream_t st = stream_of(q);
  Tensor dsum = empty({a.BH * a.L}, kFloat32, q.device());  // D = rowsum(dO * O)
  if (a.BH * a.L > 0) {
    const unsigned blocks = unsigned(a.BH * ((a.L + kTile - 1) / kTile));
    sdpa_backward_dq_wmma_kernel<T>
        <<<blocks, kTcThreads, dq_smem, st>>>(ptr<T>(g), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(o),
                                              ptr<float>(lse), ptr<T>(gq), ptr<float>(dsum), a);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
  if (a.BH * a.S > 0) {
    const unsigned blocks = unsigned(a.BH * ((a.S + kTile - 1) / kTile));
    sdpa_backward_dkv_wmma_kernel<T><<<blocks, kTcThreads, dkv_smem, st>>>(
        ptr<T>(g), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<float>(lse), ptr<float>(dsum), ptr<T>(gk),
        ptr<T>(gv), a);
    MINIDL_CUDA_LAUNCH_CHECK();
  }
  return true;
}

template bool sdpa_backward_wmma<Half>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&,
                                       const Args<float>&);
template bool sdpa_backward_wmma<BFloat16>(const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                           Tensor&, Tensor&, const Args<float>&);

}  // namespace minidl::cuda::attention_detail
