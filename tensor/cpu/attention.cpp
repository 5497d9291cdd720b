// CPU scaled_dot_product_attention: flash-attention style, blocked over queries and keys with
// an online softmax (running max and sum) in f32 (f64 for f64); half inputs are converted per
// block. Forward keeps only out and lse; backward recomputes probabilities blockwise. Heads are
// read and written through HeadLayout (strided views, e.g. of a fused [B,T,3C] projection).
#include <Eigen/Core>
#include <Eigen/StdVector>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/attention_layout.h"
#include "tensor/cpu/attention_blocks.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/random.h"

namespace minidl::cpu {
namespace {

using namespace attention_detail;

// Keys per block: 256 keys make a GPT-sized head (T = 256) one block, so the online softmax
// rescales nothing and the GEMMs run on [64, 256] score blocks. Scratch stays O(kBq * kBk).
constexpr int64_t kBk = 256;

// Queries per block: 64 (32 for 16-bit inputs). Under is_causal every block leaves out the keys
// after its last query (masked for all its rows), in forward and backward.
template <typename T>
constexpr int64_t kBq = is_reduced_float_v<T> ? 32 : 64;

// rows x cols elements at p (row stride ld) as A: p itself (and ld) when T == A, else a
// converted copy in buf with row stride cols. *ld_out: the result's row stride.
template <typename A, typename T>
const A* as_acc(const T* p, int64_t rows, int64_t cols, int64_t ld, Buf<A>& buf, int64_t* ld_out) {
  if constexpr (std::is_same_v<T, A>) {
    *ld_out = ld;
    return p;
  } else {
    buf.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t x = 0; x < cols; ++x) buf[size_t(r * cols + x)] = A(float(p[r * ld + x]));
    *ld_out = cols;
    return buf.data();
  }
}

// The mask, causal rule and dropout stream of one call, applied to a [ni, nj] score block.
template <typename A>
struct Masker {
  const SdpaParams& p;
  int64_t L, S;
  const bool* mb = nullptr;
  const A* mf = nullptr;
  const int64_t* offs = nullptr;
  uint64_t threshold = 0;  // keep element when its 32-bit word < threshold (u < 1 - p)
  A keep_scale = 0;

  Masker(const SdpaParams& prm, int64_t l, int64_t s) : p(prm), L(l), S(s) {
    if (p.mask.defined()) {
      offs = p.mask_offsets.data_ptr<int64_t>();
      if (p.mask.dtype() == kBool)
        mb = p.mask.data_ptr<bool>();
      else
        mf = p.mask.data_ptr<A>();
    }
    if (p.dropout_p > 0) {
      // word * 2^-32 < keep  <=>  word < ceil(keep * 2^32) (dropout_mask's bernoulli rule)
      threshold = uint64_t(std::ceil((1.0 - p.dropout_p) * 4294967296.0));
      keep_scale = p.dropout_p < 1 ? A(1.0 / (1.0 - p.dropout_p)) : A(0);
    }
  }

  // Scores of queries i0.. and keys j0..: masked entries -> -inf, float mask added.
  void apply(A* s, int64_t ni, int64_t nj, int64_t bh, int64_t i0, int64_t j0) const {
    const A ninf = -std::numeric_limits<A>::infinity();
    const int64_t sl = p.mask_stride_l, ss = p.mask_stride_s;
    for (int64_t ii = 0; ii < ni; ++ii) {
      A* row = s + ii * nj;
      const int64_t i = i0 + ii;
      if (mb) {
        const bool* m = mb + offs[bh] + i * sl + j0 * ss;
        for (int64_t jj = 0; jj < nj; ++jj)
          if (!m[jj * ss]) row[jj] = ninf;
      } else if (mf) {
        const A* m = mf + offs[bh] + i * sl + j0 * ss;
        for (int64_t jj = 0; jj < nj; ++jj) row[jj] += m[jj * ss];
      }
      if (p.is_causal)
        for (int64_t jj = std::max<int64_t>(0, i - j0 + 1); jj < nj; ++jj) row[jj] = ninf;
    }
  }

  // Dropout factors (0 or 1/(1-p)) of one row's keys j0..j0+nj.
  void factors(A* z, int64_t nj, int64_t bh, int64_t i, int64_t j0) const {
    const PhiloxStream st{p.seed, p.offset};
    const uint64_t base = uint64_t((bh * L + i) * S + j0);
    uint64_t cur = ~uint64_t(0);
    Philox4x32 blk{};
    for (int64_t jj = 0; jj < nj; ++jj) {
      const uint64_t idx = base + uint64_t(jj);
      if (idx / 4 != cur) {
        cur = idx / 4;
        blk = st.block(cur);
      }
      z[jj] = uint64_t(blk.v[idx % 4]) < threshold ? keep_scale : A(0);
    }
  }
};

// q:[BH,L,E] k:[BH,S,E] v:[BH,S,Ev] -> out:[BH,L,Ev], lse:[BH,L] contiguous; q, k, v, out
// also as [B,H,n,d] views with unit last stride (HeadLayout).
template <typename T>
void sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                  const SdpaParams& p) {
  using A = acc_t<T>;
  const int64_t BH = head_count(q), L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  const HeadLayout lq = head_layout(q), lk = head_layout(k), lv = head_layout(v),
                   lo = head_layout(out);
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  T* op = out.data_ptr<T>();
  A* lp = lse.data_ptr<A>();
  const Masker<A> mk(p, L, S);
  const int64_t nqb = (L + kBq<T> - 1) / kBq<T>;
  const A ninf = -std::numeric_limits<A>::infinity();
  parallel_for(BH * nqb, 1, [&](int64_t b, int64_t e) {
    const SingleThreaded one;
    Buf<A> kbuf, vbuf, qs(static_cast<size_t>(kBq<T> * E)), sb(static_cast<size_t>(kBq<T> * kBk)),
        z(static_cast<size_t>(kBk));
    Buf<A> acc(static_cast<size_t>(kBq<T> * Ev)), m(static_cast<size_t>(kBq<T>)),
        l(static_cast<size_t>(kBq<T>));
    for (int64_t t = b; t < e; ++t) {
      const int64_t bh = t / nqb, i0 = (t % nqb) * kBq<T>, ni = std::min(kBq<T>, L - i0);
      const int64_t kend = p.is_causal ? std::min(S, i0 + ni) : S;
      int64_t ldk = 0, ldv = 0;  // only the keys this block sees
      const A* K = as_acc(kp + lk.offset(bh), kend, E, lk.row_stride, kbuf, &ldk);
      const A* V = as_acc(vp + lv.offset(bh), kend, Ev, lv.row_stride, vbuf, &ldv);
      const T* Q = qp + lq.offset(bh) + i0 * lq.row_stride;
      for (int64_t ii = 0; ii < ni; ++ii)
        for (int64_t x = 0; x < E; ++x)
          qs[size_t(ii * E + x)] = A(p.scale) * A(Q[ii * lq.row_stride + x]);
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), A(0));
      MMap<A> accm(acc.data(), ni, Ev);
      accm.setZero();
      for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
        const int64_t nj = std::min(kBk, kend - j0);
        gemm_blk<A>(false, true, ni, nj, E, 1, qs.data(), E, K + j0 * ldk, ldk, 0, sb.data(), nj);
        mk.apply(sb.data(), ni, nj, bh, i0, j0);
        for (int64_t ii = 0; ii < ni; ++ii) {
          RowArr<A> row(sb.data() + ii * nj, nj);
          const A row_max = lane_max(row.data(), nj);
          const A mnew = std::max(m[size_t(ii)], row_max);
          if (mnew == ninf) {  // nothing attended yet
            row.setZero();
            continue;
          }
          const A alpha = std::exp(m[size_t(ii)] - mnew);
          exp_shifted(row.data(), nj, mnew);
          const A row_sum = lane_sum(row.data(), nj);
          l[size_t(ii)] = l[size_t(ii)] * alpha + row_sum;
          if (p.dropout_p > 0) {
            mk.factors(z.data(), nj, bh, i0 + ii, j0);
            row *= RowArr<A>(z.data(), nj);
          }
          if (alpha != A(1)) accm.row(ii) *= alpha;
          m[size_t(ii)] = mnew;
        }
        gemm_blk<A>(false, false, ni, Ev, nj, 1, sb.data(), nj, V + j0 * ldv, ldv, 1, acc.data(),
                    Ev);
      }
      for (int64_t ii = 0; ii < ni; ++ii) {
        const A li = l[size_t(ii)];
        const A inv = li > 0 ? A(1) / li : A(0);
        T* o = op + lo.offset(bh) + (i0 + ii) * lo.row_stride;
        for (int64_t x = 0; x < Ev; ++x) o[x] = T(acc[size_t(ii * Ev + x)] * inv);
        lp[bh * L + i0 + ii] =
            li > 0 ? m[size_t(ii)] + std::log(li) : std::numeric_limits<A>::infinity();
      }
    }
  });
}

template <typename T>
void sdpa_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& o, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                   const SdpaParams& p) {
  using A = acc_t<T>;
  const int64_t BH = head_count(q), L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  const HeadLayout lq = head_layout(q), lk = head_layout(k), lv = head_layout(v),
                   lg = head_layout(g), lo = head_layout(o), lgq = head_layout(gq),
                   lgk = head_layout(gk), lgv = head_layout(gv);
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  const T *gp = g.data_ptr<T>(), *opp = o.data_ptr<T>();
  const A* lp = lse.data_ptr<A>();
  T *gqp = gq.data_ptr<T>(), *gkp = gk.data_ptr<T>(), *gvp = gv.data_ptr<T>();
  const Masker<A> mk(p, L, S);
  const A sc = A(p.scale);
  parallel_for(BH, 1, [&](int64_t b, int64_t e) {
    const SingleThreaded one;
    Buf<A> qbuf, kbuf, vbuf, gbuf, D(static_cast<size_t>(L)), dq(static_cast<size_t>(L * E));
    Buf<A> dk(static_cast<size_t>(kBk * E)), dv(static_cast<size_t>(kBk * Ev)),
        pb(static_cast<size_t>(kBq<T> * kBk));
    Buf<A> dp(static_cast<size_t>(kBq<T> * kBk)), z(static_cast<size_t>(kBq<T> * kBk));
    for (int64_t bh = b; bh < e; ++bh) {
      int64_t ldq = 0, ldk = 0, ldv = 0, ldg = 0;  // row strides of Q, K, V, dO
      const A* Q = as_acc(qp + lq.offset(bh), L, E, lq.row_stride, qbuf, &ldq);
      const A* K = as_acc(kp + lk.offset(bh), S, E, lk.row_stride, kbuf, &ldk);
      const A* V = as_acc(vp + lv.offset(bh), S, Ev, lv.row_stride, vbuf, &ldv);
      const A* dO = as_acc(gp + lg.offset(bh), L, Ev, lg.row_stride, gbuf, &ldg);
      const A* lrow = lp + bh * L;
      for (int64_t i = 0; i < L; ++i) {  // D_i = rowsum(dO * O)
        const T* orow = opp + lo.offset(bh) + i * lo.row_stride;
        A d = 0;
        for (int64_t x = 0; x < Ev; ++x) d += dO[i * ldg + x] * A(orow[x]);
        D[size_t(i)] = d;
      }
      MMap<A> dQ(dq.data(), L, E);
      dQ.setZero();
      for (int64_t j0 = 0; j0 < S; j0 += kBk) {
        const int64_t nj = std::min(kBk, S - j0);
        MMap<A> dK(dk.data(), nj, E), dV(dv.data(), nj, Ev);
        dK.setZero();
        dV.setZero();
        for (int64_t i0 = p.is_causal ? j0 : 0; i0 < L; i0 += kBq<T>) {
          const int64_t ni = std::min(kBq<T>, L - i0);
          // is_causal: only the keys up to the block's last query, nje.
          const int64_t nje = p.is_causal ? std::min(nj, i0 + ni - j0) : nj;
          gemm_blk<A>(false, true, ni, nje, E, sc, Q + i0 * ldq, ldq, K + j0 * ldk, ldk, 0,
                      pb.data(), nje);
          mk.apply(pb.data(), ni, nje, bh, i0, j0);
          for (int64_t ii = 0; ii < ni; ++ii) {
            exp_shifted(pb.data() + ii * nje, nje, lrow[i0 + ii]);
          }
          gemm_blk<A>(false, true, ni, nje, Ev, 1, dO + i0 * ldg, ldg, V + j0 * ldv, ldv, 0,
                      dp.data(), nje);
          if (p.dropout_p > 0) {
            MMap<A> P(pb.data(), ni, nje), dP(dp.data(), ni, nje), Z(z.data(), ni, nje);
            for (int64_t ii = 0; ii < ni; ++ii)
              mk.factors(z.data() + ii * nje, nje, bh, i0 + ii, j0);
            dP = dP.cwiseProduct(Z);
            Z = P.cwiseProduct(Z);  // the dropped probabilities
            gemm_blk<A>(true, false, nje, Ev, ni, 1, z.data(), nje, dO + i0 * ldg, ldg, 1,
                        dv.data(), Ev);
          } else {
            gemm_blk<A>(true, false, nje, Ev, ni, 1, pb.data(), nje, dO + i0 * ldg, ldg, 1,
                        dv.data(), Ev);
          }
          for (int64_t ii = 0; ii < ni; ++ii) {  // dS = P * (dP - D_i), into dP
            RowArr<A> d(dp.data() + ii * nje, nje);
            d = RowArr<A>(pb.data() + ii * nje, nje) * (d - D[size_t(i0 + ii)]);
          }
          gemm_blk<A>(false, false, ni, E, nje, sc, dp.data(), nje, K + j0 * ldk, ldk, 1,
                      dq.data() + i0 * E, E);
          gemm_blk<A>(true, false, nje, E, ni, sc, dp.data(), nje, Q + i0 * ldq, ldq, 1, dk.data(),
                      E);
        }
        for (int64_t jj = 0; jj < nj; ++jj) {
          T* gkr = gkp + lgk.offset(bh) + (j0 + jj) * lgk.row_stride;
          T* gvr = gvp + lgv.offset(bh) + (j0 + jj) * lgv.row_stride;
          for (int64_t x = 0; x < E; ++x) gkr[x] = T(dk[size_t(jj * E + x)]);
          for (int64_t x = 0; x < Ev; ++x) gvr[x] = T(dv[size_t(jj * Ev + x)]);
        }
      }
      for (int64_t i = 0; i < L; ++i) {
        T* gqr = gqp + lgq.offset(bh) + i * lgq.row_stride;
        for (int64_t x = 0; x < E; ++x) gqr[x] = T(dq[size_t(i * E + x)]);
      }
    }
  });
}

void sdpa_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse, const SdpaParams& p) {
  dispatch_floating(q.dtype(), "scaled_dot_product_attention",
                    [&]<typename T>() { sdpa_forward<T>(q, k, v, out, lse, p); });
}

void sdpa_backward_kernel(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& o, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                          const SdpaParams& p) {
  dispatch_floating(q.dtype(), "scaled_dot_product_attention_backward",
                    [&]<typename T>() { sdpa_backward<T>(g, q, k, v, o, lse, gq, gk, gv, p); });
}

}  // namespace

void register_attention_kernels() {
  register_kernel<Op::scaled_dot_product_attention>(DeviceType::cpu, sdpa_forward_kernel);
  register_kernel<Op::scaled_dot_product_attention_backward>(DeviceType::cpu, sdpa_backward_kernel);
}

}  // namespace minidl::cpu
