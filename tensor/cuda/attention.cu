// CUDA scaled_dot_product_attention (q, k, v, out and the gradients as strided head views,
// HeadLayout): a warp per query row with FMA, forward (flash-style,
// saving only out and the log-sum-exp) and backward (recomputing the probabilities: a warp per
// query row for dQ, a warp per key row for dK/dV, no atomics), and the host dispatch; bf16/f16
// forwards and backwards try flash_attention.cu (mma.sync), then the WMMA kernels.
#include "tensor/cuda_api.h"
#include "tensor/cuda/attention.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

using namespace attention_detail;

constexpr int kWarps = 4;           // query rows per block (one warp each)
constexpr int kPer = kMaxDim / 32;  // head-dim values per lane

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
  const T* qr = q + a.lq.offset(bh) + i * a.lq.row_stride;
  for (int64_t e = lane; e < a.E; e += 32) qs[e] = to_op(qr[e]) * a.scale;
  __syncwarp();
  const T* kb = k + a.lk.offset(bh);
  const T* vb = v + a.lv.offset(bh);
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
      for (int64_t e = 0; e < a.E; ++e) d += qs[e] * to_op(kb[j * a.lk.row_stride + e]);
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
      const T* vr = vb + (j0 + jj) * a.lv.row_stride;
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int64_t e = lane + 32 * x;
        if (e < a.Ev) acc[x] += pj * to_op(vr[e]);
      }
    }
    m = mnew;
  }
  const A inv = l > 0 ? A(1) / l : A(0);
  T* orow = out + a.lo.offset(bh) + i * a.lo.row_stride;
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int64_t e = lane + 32 * x;
    if (e < a.Ev) orow[e] = from_op<T>(acc[x] * inv);
  }
  if (lane == 0) lse[row] = l > 0 ? m + dlog(l) : A(INFINITY);
}

// The backward recomputes the probabilities p = exp(s - lse) twice, with no atomics:
// sdpa_backward_dq_kernel, one warp per query row i, writes dQ_i and D_i = rowsum(dO_i * O_i);
// sdpa_backward_dkv_kernel, one warp per key row j, then writes dK_j and dV_j. With z the
// dropout factor: dV_j = sum_i p z dO_i, dS = p (z dO_i.V_j - D_i), dQ_i = scale sum_j dS K_j,
// dK_j = scale sum_i dS Q_i.
template <typename T, typename A>
__global__ void sdpa_backward_dq_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                        const T* __restrict__ k, const T* __restrict__ v,
                                        const T* __restrict__ o, const A* __restrict__ lse,
                                        T* __restrict__ gq, A* __restrict__ dsum, Args<A> a) {
  __shared__ A qsh[kWarps][kMaxDim];
  __shared__ A dosh[kWarps][kMaxDim];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= a.BH * a.L) return;
  const int64_t bh = row / a.L, i = row % a.L;
  A* qs = qsh[warp];
  A* dos = dosh[warp];
  const T* qr = q + a.lq.offset(bh) + i * a.lq.row_stride;
  const T* gr = g + a.lg.offset(bh) + i * a.lg.row_stride;
  const T* orow = o + a.lo.offset(bh) + i * a.lo.row_stride;
  for (int64_t e = lane; e < a.E; e += 32) qs[e] = to_op(qr[e]);
  A dpart = 0;
  for (int64_t e = lane; e < a.Ev; e += 32) {
    dos[e] = to_op(gr[e]);
    dpart += dos[e] * to_op(orow[e]);
  }
  const A D = warp_sum(dpart);  // rowsum(dO * O)
  if (lane == 0) dsum[row] = D;
  __syncwarp();
  const A li = lse[row];
  const T* kb = k + a.lk.offset(bh);
  const T* vb = v + a.lv.offset(bh);
  A dq[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) dq[x] = 0;
  const int64_t kend = a.causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
  for (int64_t j0 = 0; j0 < kend; j0 += 32) {
    const int64_t j = j0 + lane;
    A ds = 0;
    if (j < kend) {
      A s = 0, dp = 0;
      for (int64_t e = 0; e < a.E; ++e) s += qs[e] * to_op(kb[j * a.lk.row_stride + e]);
      for (int64_t e = 0; e < a.Ev; ++e) dp += dos[e] * to_op(vb[j * a.lv.row_stride + e]);
      s = masked(a, s * a.scale, bh, i, j);
      const A p = s == A(-INFINITY) ? A(0) : dexp(s - li);
      const A z = a.dropout ? drop_factor(a, bh, i, j) : A(1);
      ds = p * (dp * z - D);
    }
    const int nj = int(kend - j0 < 32 ? kend - j0 : 32);
    for (int jj = 0; jj < nj; ++jj) {
      const A dsj = __shfl_sync(kFull, ds, jj);
      if (dsj == A(0)) continue;  // uniform over the warp
      const T* kr = kb + (j0 + jj) * a.lk.row_stride;
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int64_t e = lane + 32 * x;
        if (e < a.E) dq[x] += dsj * to_op(kr[e]);
      }
    }
  }
  T* gqr = gq + a.lgq.offset(bh) + i * a.lgq.row_stride;
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int64_t e = lane + 32 * x;
    if (e < a.E) gqr[e] = from_op<T>(dq[x] * a.scale);
  }
}

// One warp per key row j (over BH*S): lanes take 32 query rows at a time (causal: i >= j).
template <typename T, typename A>
__global__ void sdpa_backward_dkv_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                         const T* __restrict__ k, const T* __restrict__ v,
                                         const A* __restrict__ lse, const A* __restrict__ dsum,
                                         T* __restrict__ gk, T* __restrict__ gv, Args<A> a) {
  __shared__ A ksh[kWarps][kMaxDim];
  __shared__ A vsh[kWarps][kMaxDim];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t col = int64_t(blockIdx.x) * kWarps + warp;
  if (col >= a.BH * a.S) return;
  const int64_t bh = col / a.S, j = col % a.S;
  A* ks = ksh[warp];
  A* vs = vsh[warp];
  const T* kr = k + a.lk.offset(bh) + j * a.lk.row_stride;
  const T* vr = v + a.lv.offset(bh) + j * a.lv.row_stride;
  for (int64_t e = lane; e < a.E; e += 32) ks[e] = to_op(kr[e]);
  for (int64_t e = lane; e < a.Ev; e += 32) vs[e] = to_op(vr[e]);
  __syncwarp();
  const T* qb = q + a.lq.offset(bh);
  const T* gb = g + a.lg.offset(bh);
  const A* lb = lse + bh * a.L;
  const A* db = dsum + bh * a.L;
  A dk[kPer], dv[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) dk[x] = dv[x] = 0;
  const int64_t ibegin = a.causal ? (j < a.L ? j : a.L) : 0;  // causal: key j serves rows i >= j
  for (int64_t i0 = ibegin; i0 < a.L; i0 += 32) {
    const int64_t i = i0 + lane;
    A ds = 0, pz = 0;
    if (i < a.L) {
      A s = 0, dp = 0;
      for (int64_t e = 0; e < a.E; ++e) s += to_op(qb[i * a.lq.row_stride + e]) * ks[e];
      for (int64_t e = 0; e < a.Ev; ++e) dp += to_op(gb[i * a.lg.row_stride + e]) * vs[e];
      s = masked(a, s * a.scale, bh, i, j);
      const A p = s == A(-INFINITY) ? A(0) : dexp(s - lb[i]);
      const A z = a.dropout ? drop_factor(a, bh, i, j) : A(1);
      pz = p * z;
      ds = p * (dp * z - db[i]);
    }
    const int ni = int(a.L - i0 < 32 ? a.L - i0 : 32);
    for (int ii = 0; ii < ni; ++ii) {
      const A dsi = __shfl_sync(kFull, ds, ii), pzi = __shfl_sync(kFull, pz, ii);
      if (dsi != A(0)) {  // uniform over the warp
        const T* qr = qb + (i0 + ii) * a.lq.row_stride;
#pragma unroll
        for (int x = 0; x < kPer; ++x) {
          const int64_t e = lane + 32 * x;
          if (e < a.E) dk[x] += dsi * to_op(qr[e]);
        }
      }
      if (pzi != A(0)) {
        const T* gr = gb + (i0 + ii) * a.lg.row_stride;
#pragma unroll
        for (int x = 0; x < kPer; ++x) {
          const int64_t e = lane + 32 * x;
          if (e < a.Ev) dv[x] += pzi * to_op(gr[e]);
        }
      }
    }
  }
  T* gkr = gk + a.lgk.offset(bh) + j * a.lgk.row_stride;
  T* gvr = gv + a.lgv.offset(bh) + j * a.lgv.row_stride;
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int64_t e = lane + 32 * x;
    if (e < a.E) gkr[e] = from_op<T>(dk[x] * a.scale);
    if (e < a.Ev) gvr[e] = from_op<T>(dv[x]);
  }
}

void check_dims(const Tensor& q, const Tensor& v, std::string_view op) {
  MINIDL_CHECK(q.size(-1) <= kMaxDim && v.size(-1) <= kMaxDim, "op `", op,
               "`: the CUDA kernel supports head dims up to ", kMaxDim, ", got q ", q.shape_str(),
               " and v ", v.shape_str());
}

// The dropout stream is (seed, offset) by value, fixed when a graph is captured: every replay
// would reuse the capture's mask (and not advance the generator). Refused until the kernels
// read a replay-refreshed Philox slot (tensor/cuda/runtime/graph_rng.cuh).
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
    Args<A> a = make_args<A>(q, k, v, p);
    a.lo = head_layout(out);
    const int64_t rows = a.BH * a.L;
    if (rows == 0) return;
    if constexpr (is_reduced_float_v<T>) {  // tensor cores where they apply and fit
      if (sdpa_forward_flash<T>(q, k, v, out, lse, a)) return;
      if (sdpa_forward_wmma<T>(q, k, v, out, lse, a)) return;
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
    Args<A> a = make_args<A>(q, k, v, p);
    a.lg = head_layout(g), a.lo = head_layout(o);
    a.lgq = head_layout(gq), a.lgk = head_layout(gk), a.lgv = head_layout(gv);
    if constexpr (is_reduced_float_v<T>) {  // tensor cores where they apply and fit
      if (sdpa_backward_flash<T>(g, q, k, v, o, lse, gq, gk, gv, a)) return;
      if (sdpa_backward_wmma<T>(g, q, k, v, o, lse, gq, gk, gv, a)) return;
    }
    const DType adt = std::is_same_v<A, double> ? kFloat64 : kFloat32;
    cudaStream_t st = stream_of(q);
    Tensor dsum = empty({a.BH * a.L}, adt, q.device());  // D_i = rowsum(dO_i * O_i)
    const int64_t rows = a.BH * a.L, cols = a.BH * a.S;
    if (rows > 0) {
      sdpa_backward_dq_kernel<T, A><<<unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, st>>>(
          ptr<T>(g), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(o), ptr<A>(lse), ptr<T>(gq),
          ptr<A>(dsum), a);
      MINIDL_CUDA_LAUNCH_CHECK();
    }
    if (cols > 0) {  // after the dQ kernel (same stream): it reads D
      sdpa_backward_dkv_kernel<T, A>
          <<<unsigned((cols + kWarps - 1) / kWarps), kWarps * 32, 0, st>>>(
              ptr<T>(g), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<A>(lse), ptr<A>(dsum), ptr<T>(gk),
              ptr<T>(gv), a);
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
