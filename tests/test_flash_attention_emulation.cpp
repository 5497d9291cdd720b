// The FlashAttention-2-style forward and backward (tensor/cuda/flash_attention{,_backward}.cuh)
// run on the host by tests/warp_emulator.h, which emulates mma.sync m16n8k16 and ldmatrix by the
// PTX fragment layouts: outputs, log-sum-exps and gradients against attention computed in f64
// from the same bf16/f16 inputs (the ldmatrix kernels bitwise equal to the 32-bit loads'). Head
// dims 64 and 128 (forward), causal and not, L and S off the tiles and unequal, q/k/v as views
// of one fused [B,T,3C] projection and out written into [B,T,C], gradients into views of one
// [B,T,3C] buffer, no keys at all.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensor/attention_layout.h"
#include "tensor/cuda/flash_attention_backward.cuh"
#include "test_util.h"
#include "warp_emulator.h"

using namespace minidl;
using testutil::check_close;
using testutil::random_tensor;

namespace {

// The kernel's grid run on the host: out (any layout) and lse:[BH,L] f32 are written.
template <typename T, int HD, bool Ldm = true>
void emulate_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                     bool causal) {
  flash::ForwardArgs a;
  a.BH = head_count(q), a.L = q.size(-2), a.S = k.size(-2);
  a.lq = head_layout(q), a.lk = head_layout(k), a.lv = head_layout(v), a.lo = head_layout(out);
  a.scale_log2 = float(1.0 / std::sqrt(double(HD)) * 1.4426950408889634);
  a.causal = causal;
  auto bits = [](const Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<T>()); };
  const uint16_t *qp = bits(q), *kp = bits(k), *vp = bits(v);
  uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<T>());
  float* lp = lse.data_ptr<float>();
  const int64_t blocks = a.BH * ((a.L + flash::kRows - 1) / flash::kRows);
  emu::run_grid<T>(blocks, flash::kThreads, flash::forward_smem_bytes<HD>(),
                   [&](int64_t block, int tid, unsigned char* smem, emu::Warp<T>& w) {
                     flash::forward_block<HD, Ldm>(a, qp, kp, vp, op, lp, block, tid, smem, w);
                   });
}

// The two backward passes' grids on the host: gq, gk, gv (any layouts) are written.
template <typename T, int HD, bool Ldm = true>
void emulate_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                      const Tensor& gout, const Tensor& lse, Tensor& gq, Tensor& gk, Tensor& gv,
                      bool causal) {
  flash::BackwardArgs a;
  a.BH = head_count(q), a.L = q.size(-2), a.S = k.size(-2);
  a.lq = head_layout(q), a.lk = head_layout(k), a.lv = head_layout(v), a.lo = head_layout(o);
  a.lg = head_layout(gout), a.lgq = head_layout(gq), a.lgk = head_layout(gk);
  a.lgv = head_layout(gv);
  a.scale = float(1.0 / std::sqrt(double(HD)));
  a.scale_log2 = float(1.0 / std::sqrt(double(HD)) * 1.4426950408889634);
  a.causal = causal;
  auto bits = [](const Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<T>()); };
  auto out_bits = [](Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<T>()); };
  const uint16_t *qp = bits(q), *kp = bits(k), *vp = bits(v), *op = bits(o), *gp = bits(gout);
  uint16_t *gqp = out_bits(gq), *gkp = out_bits(gk), *gvp = out_bits(gv);
  const float* lp = lse.data_ptr<float>();
  Tensor dsum = zeros({a.BH * a.L}, kFloat32);
  float* dp = dsum.data_ptr<float>();
  emu::run_grid<T>(a.BH * ((a.L + flash::kRows - 1) / flash::kRows), flash::kThreads,
                   flash::backward_dq_smem_bytes<HD>(),
                   [&](int64_t block, int tid, unsigned char* smem, emu::Warp<T>& w) {
                     flash::backward_dq_block<HD, Ldm>(a, qp, kp, vp, op, gp, lp, gqp, dp, block,
                                                       tid, smem, w);
                   });
  emu::run_grid<T>(a.BH * ((a.S + flash::kRows - 1) / flash::kRows), flash::kThreads,
                   flash::backward_dkv_smem_bytes<HD>(),
                   [&](int64_t block, int tid, unsigned char* smem, emu::Warp<T>& w) {
                     flash::backward_dkv_block<HD, Ldm>(a, qp, kp, vp, gp, lp, dp, gkp, gvp, block,
                                                        tid, smem, w);
                   });
}

// softmax(q k^T / sqrt(d), causal top-left) v, its log-sum-exp and the gradients of
// sum(out * gout), in f64. q:[B,H,L,d] k, v:[B,H,S,d] gout:[B,H,L,d] (any layouts).
struct Reference {
  Tensor out, lse, gq, gk, gv;  // [B,H,L,d], [B,H,L], then as q, k, v
};
Reference reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout,
                    bool causal) {
  Tensor qf = q.to(kFloat64).detach().requires_grad_(true);
  Tensor kf = k.to(kFloat64).detach().requires_grad_(true);
  Tensor vf = v.to(kFloat64).detach().requires_grad_(true);
  const int64_t L = q.size(-2), S = k.size(-2);
  Tensor s = matmul(qf, kf.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  if (causal) {
    std::vector<double> masked(size_t(L * S));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) masked[size_t(i * S + j)] = j > i ? 1 : 0;
    s = masked_fill(s, testutil::from_f64(masked, {L, S}, kBool),
                    -std::numeric_limits<double>::infinity());
  }
  const Tensor lse = logsumexp(s, {-1});
  Tensor out = matmul(exp(s - lse.unsqueeze(-1)), vf);
  sum(out * gout.to(kFloat64)).backward();
  return {out.detach(), lse.detach(), qf.grad(), kf.grad(), vf.grad()};
}

// x:[B,T,P*H*d] -> P views [B,H,T,d] with x's strides.
std::vector<Tensor> head_views(const Tensor& x, int64_t H, int64_t parts) {
  const int64_t B = x.size(0), T = x.size(1), d = x.size(2) / parts / H;
  const Tensor h = x.view({B, T, parts, H, d}).permute({2, 0, 3, 1, 4});
  std::vector<Tensor> r;
  for (int64_t p = 0; p < parts; ++p) r.push_back(h.select(0, p));
  return r;
}

struct Case {
  int64_t B, H, L, S;
  bool causal, fused_layout;
};

// |a - b| <= tol * (|b| + max|b|) elementwise: gradients of mixed signs scale with their tensor.
void near(const Tensor& a, const Tensor& b, double tol) {
  const double mx = std::max(amax(abs(b), {}).item<double>(), 0.1);
  check_close(a.to(kFloat64), b, tol, tol * mx);
}

// tol: out and the gradients (bf16 or f16 rounding of P and dS, and of the results).
template <typename T, int HD>
void check_case(const Case& c, DType dt, double tol, bool backward) {
  CAPTURE(c.B);
  CAPTURE(c.H);
  CAPTURE(c.L);
  CAPTURE(c.S);
  CAPTURE(c.causal);
  CAPTURE(c.fused_layout);
  CAPTURE(HD);
  Tensor q, k, v, out, gout, gq, gk, gv;
  if (c.fused_layout) {  // one [B,T,3C] projection, out into [B,T,C] (L == S)
    const Tensor qkv = random_tensor({c.B, c.L, 3 * c.H * HD}, dt, 11, -2, 2);
    auto h = head_views(qkv, c.H, 3);
    q = h[0], k = h[1], v = h[2];
    out = head_views(zeros({c.B, c.L, c.H * HD}, dt), c.H, 1)[0];
    gout = head_views(random_tensor({c.B, c.L, c.H * HD}, dt, 15, -1, 1), c.H, 1)[0];
    h = head_views(zeros({c.B, c.L, 3 * c.H * HD}, dt), c.H, 3);
    gq = h[0], gk = h[1], gv = h[2];
  } else {
    q = random_tensor({c.B, c.H, c.L, HD}, dt, 12, -2, 2);
    k = random_tensor({c.B, c.H, c.S, HD}, dt, 13, -2, 2);
    v = random_tensor({c.B, c.H, c.S, HD}, dt, 14, -2, 2);
    out = zeros({c.B, c.H, c.L, HD}, dt);
    gout = random_tensor({c.B, c.H, c.L, HD}, dt, 15, -1, 1);
    gq = full({c.B, c.H, c.L, HD}, 7.0, dt);  // every element must be overwritten
    gk = full({c.B, c.H, c.S, HD}, 7.0, dt);
    gv = full({c.B, c.H, c.S, HD}, 7.0, dt);
  }
  Tensor lse = zeros({c.B * c.H, c.L}, kFloat32);
  emulate_forward<T, HD>(q, k, v, out, lse, c.causal);
  {  // the ldmatrix fragments carry the same values as the 32-bit loads: bitwise the same
    Tensor out32 = zeros_like(out), lse32 = zeros_like(lse);
    emulate_forward<T, HD, false>(q, k, v, out32, lse32, c.causal);
    CHECK(equal(out32, out));
    CHECK(equal(lse32, lse));
  }
  if (backward) {
    emulate_backward<T, HD>(q, k, v, out, gout, lse, gq, gk, gv, c.causal);
    Tensor gq32 = full_like(gq, 7.0), gk32 = full_like(gk, 7.0), gv32 = full_like(gv, 7.0);
    emulate_backward<T, HD, false>(q, k, v, out, gout, lse, gq32, gk32, gv32, c.causal);
    CHECK(equal(gq32, gq));  // the ldmatrix passes bitwise equal to the 32-bit loads'
    CHECK(equal(gk32, gk));
    CHECK(equal(gv32, gv));
  }
  if (c.S == 0) {  // no keys: zeros and +inf, as the other CUDA kernels write; dq = 0
    CHECK(amax(abs(out.to(kFloat64)), {}).item<double>() == 0.0);
    CHECK(std::isinf(amin(lse, {}).item<float>()));
    if (backward) CHECK(amax(abs(gq.to(kFloat64)), {}).item<double>() == 0.0);
    return;
  }
  const Reference ref = reference(q, k, v, gout, c.causal);
  check_close(out.to(kFloat64), ref.out, tol, tol);
  check_close(lse.to(kFloat64).view({c.B, c.H, c.L}), ref.lse, 1e-4, 1e-4);
  if (!backward) return;
  near(gq, ref.gq, tol);
  near(gk, ref.gk, tol);
  near(gv, ref.gv, tol);
}

}  // namespace

TEST_CASE("flash attention (host emulation of mma.sync): head dim 64, forward and backward") {
  const double bf16 = 2e-2, f16 = 4e-3;  // P and dS rounded to T for the products
  check_case<BFloat16, 64>({1, 2, 128, 128, true, false}, kBFloat16, bf16, true);
  check_case<BFloat16, 64>({2, 2, 128, 128, false, true}, kBFloat16, bf16, true);
  check_case<Half, 64>({1, 2, 70, 70, true, true}, kFloat16, f16, true);
  check_case<BFloat16, 64>({1, 1, 37, 100, false, false}, kBFloat16, bf16, true);
  check_case<Half, 64>({1, 1, 100, 37, true, false}, kFloat16, f16, true);
  check_case<BFloat16, 64>({1, 1, 5, 0, true, false}, kBFloat16, bf16, true);
}

TEST_CASE("flash attention forward (host emulation of mma.sync): head dim 128, 32-key tiles") {
  check_case<BFloat16, 128>({1, 1, 100, 100, true, true}, kBFloat16, 2e-2, false);
  check_case<Half, 128>({1, 2, 65, 33, false, false}, kFloat16, 4e-3, false);
}
