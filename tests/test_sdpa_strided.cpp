// scaled_dot_product_attention on strided head views (tensor/attention_layout.h): q, k, v read as
// [B,nh,T,hd] views of one [B,T,3C] projection, out written through a [B,nh,T,hd] view of
// [B,T,C], gradients into views of one [B,T,3C] buffer, against the contiguous path (f32, f64,
// bf16; causal, dropout); the transformer's no-copy attention against MINIDL_UNFUSED=qkv_attention
// and f64 gradcheck; suite cuda_attention_strided: the CUDA kernels on the same views.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/transformer.h"
#include "tensor/cuda_api.h"
#include "tensor/sdpa_out.h"
#include "tensor/variants.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

// x:[B,T,P*nh*hd] -> P views [B,nh,T,hd] (x's strides; no copy).
std::vector<Tensor> heads(const Tensor& x, int64_t nh, int64_t parts) {
  const int64_t B = x.size(0), T = x.size(1), hd = x.size(2) / parts / nh;
  const Tensor h = x.view({B, T, parts, nh, hd}).permute({2, 0, 3, 1, 4});
  std::vector<Tensor> r;
  for (int64_t p = 0; p < parts; ++p) r.push_back(h.select(0, p));
  return r;
}

struct Result {
  Tensor out, lse, gq, gk, gv;
};

// Forward and backward through the strided views of qkv:[B,T,3C] (out into [B,T,C], gradients
// into one [B,T,3C]) or, contiguous = true, through contiguous copies of the heads.
Result run(const Tensor& qkv, const Tensor& gout, int64_t nh, bool causal, double dropout,
           bool contiguous) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  std::vector<Tensor> in = heads(qkv, nh, 3);
  Tensor g = heads(gout, nh, 1)[0];
  if (contiguous) {
    for (Tensor& t : in) t = t.contiguous();
    g = g.contiguous();
  }
  Generator gen(11);
  const SdpaParams p = *native::scaled_dot_product_attention_params(in[0], in[1], in[2], Tensor(),
                                                                    dropout, causal, {}, &gen);
  Result r;
  if (contiguous) {
    const SdpaForwardResult f =
        native::scaled_dot_product_attention_forward(in[0], in[1], in[2], p);
    r.out = f.out, r.lse = f.lse;
    const SdpaGrads gr =
        native::scaled_dot_product_attention_backward(g, in[0], in[1], in[2], f.out, f.lse, p);
    r.gq = gr.grad_q, r.gk = gr.grad_k, r.gv = gr.grad_v;
    return r;
  }
  const Tensor y = empty({B, T, C}, qkv.dtype(), qkv.device());
  const Tensor yv = heads(y, nh, 1)[0];
  const SdpaForwardResult f =
      native::scaled_dot_product_attention_forward_out(in[0], in[1], in[2], p, yv);
  CHECK(f.out.data_ptr() == yv.data_ptr());  // written in place
  const Tensor gqkv = empty({B, T, 3 * C}, qkv.dtype(), qkv.device());
  const std::vector<Tensor> gh = heads(gqkv, nh, 3);
  const SdpaGrads into{gh[0], gh[1], gh[2]};
  native::scaled_dot_product_attention_backward(g, in[0], in[1], in[2], f.out, f.lse, p, &into);
  return {yv, f.lse, gh[0], gh[1], gh[2]};
}

void check_same(const Result& a, const Result& b) {
  CHECK(bitwise_equal(a.out.contiguous(), b.out.contiguous()));
  CHECK(bitwise_equal(a.lse, b.lse));
  CHECK(bitwise_equal(a.gq.contiguous(), b.gq.contiguous()));
  CHECK(bitwise_equal(a.gk.contiguous(), b.gk.contiguous()));
  CHECK(bitwise_equal(a.gv.contiguous(), b.gv.contiguous()));
}

}  // namespace

TEST_CASE("sdpa strided heads: views of [B,T,3C] in, [B,T,C] out, bitwise the contiguous path") {
  struct Cfg {
    int64_t B, T, nh, hd;
    bool causal;
    double dropout;
  };
  const Cfg cfgs[] = {{2, 70, 3, 16, true, 0.0},  // T over the 64- and 32-row blocks
                      {2, 9, 2, 8, false, 0.0},
                      {1, 67, 2, 8, true, 0.25},    // dropout: the same stream either way
                      {1, 300, 1, 4, false, 0.0}};  // S over the 256-key blocks
  for (DType dt : {kFloat32, kFloat64, kBFloat16})
    for (const Cfg& c : cfgs) {
      CAPTURE(dt);
      CAPTURE(c.T);
      const int64_t C = c.nh * c.hd;
      const Tensor qkv = random_tensor({c.B, c.T, 3 * C}, kFloat32, 1).to(dt);
      const Tensor gout = random_tensor({c.B, c.T, C}, kFloat32, 2).to(dt);
      const Result strided = run(qkv, gout, c.nh, c.causal, c.dropout, false);
      const Result dense = run(qkv, gout, c.nh, c.causal, c.dropout, true);
      check_same(strided, dense);
    }
}

TEST_CASE("sdpa strided heads: mixed layouts, broadcast k, and refused output buffers") {
  // q a strided view, k broadcast over the heads ([B,1,S,E]: copied), v contiguous.
  const Tensor qkv = random_tensor({2, 20, 3 * 24}, kFloat64, 3);
  const std::vector<Tensor> h = heads(qkv, 3, 3);
  const Tensor k1 = h[1].narrow(1, 0, 1);
  const Tensor v = h[2].contiguous();
  const Tensor a = scaled_dot_product_attention(h[0], k1, v, {}, 0.0, true);
  const Tensor b =
      scaled_dot_product_attention(h[0].contiguous(), k1.contiguous(), v, {}, 0.0, true);
  CHECK(bitwise_equal(a, b));
  // the composite reference: within rounding
  CHECK(allclose(a, scaled_dot_product_attention_math(h[0], k1, v, {}, 0.0, true), 1e-12, 1e-12));
  Generator gen(1);
  const SdpaParams p =
      *native::scaled_dot_product_attention_params(h[0], h[1], h[2], {}, 0.0, false, {}, &gen);
  CHECK_THROWS_WITH_AS(native::scaled_dot_product_attention_forward_out(
                           h[0], h[1], h[2], p, empty({2, 3, 20, 16}, kFloat64, kCPU)),
                       doctest::Contains("expected out of shape [2, 3, 20, 8]"), Error);
  const Tensor every_other = empty({2, 3, 20, 16}, kFloat64, kCPU).slice(3, 0, 16, 2);
  CHECK_THROWS_WITH_AS(
      native::scaled_dot_product_attention_forward_out(h[0], h[1], h[2], p, every_other),
      doctest::Contains("must be contiguous, or 3-D or 4-D with unit stride"), Error);
  CHECK_THROWS_WITH_AS(native::scaled_dot_product_attention_forward_out(
                           h[0], h[1], h[2], p, empty({2, 3, 20, 8}, kFloat32, kCPU)),
                       doctest::Contains("out must be a "), Error);
}

TEST_CASE("transformer qkv attention without copies: outputs and gradients as the general path") {
  ScopedUnfused restore;
  for (DType dt : {kFloat64, kFloat32})
    for (double dropout : {0.0, 0.2}) {
      CAPTURE(dt);
      CAPTURE(dropout);
      const Tensor x = random_tensor({2, 13, 32}, kFloat32, 4).to(dt);
      const Tensor g = random_tensor({2, 13, 32}, kFloat32, 5).to(dt);
      auto run_block = [&](const std::string& unfused) {
        variants::set_unfused(unfused);
        Generator gen(7);
        nn::TransformerBlock block(32, 4, dropout, true, &gen);
        block.to(dt);
        Tensor xi = x.clone().requires_grad_();
        Tensor y = block.forward(xi);
        y.backward(g);
        std::vector<Tensor> r{y.detach(), xi.grad()};
        for (const Tensor& p : block.parameters()) r.push_back(p.grad());
        return r;
      };
      const std::vector<Tensor> fused = run_block("");
      const std::vector<Tensor> old = run_block("qkv_attention");
      REQUIRE(fused.size() == old.size());
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      for (size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        CHECK(allclose(fused[i], old[i], tol, tol));
      }
    }
}

TEST_CASE("transformer qkv attention without copies: f64 gradcheck through the block") {
  Generator gen(3);
  nn::CausalSelfAttention attn(12, 3, 0.0, true, &gen);
  attn.to(kFloat64);
  const Tensor x = random_tensor({2, 5, 12}, kFloat64, 6).requires_grad_();
  GRADCHECK([&](const std::vector<Tensor>& in) { return attn.forward(in[0]); }, {x});
  // the autograd op on strided views of one leaf: its backward writes through the views
  const Tensor qkv = random_tensor({2, 6, 3 * 8}, kFloat64, 7).requires_grad_();
  GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        const std::vector<Tensor> h = heads(in[0], 2, 3);
        return scaled_dot_product_attention(h[0], h[1], h[2], {}, 0.0, true);
      },
      {qkv});
}

TEST_SUITE("cuda_attention_strided") {
  TEST_CASE(
      "cuda_attention_strided: head views of [B,T,3C] match the CPU and the contiguous path") {
    const Device gpu{DeviceType::cuda, 0};
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16})
      for (int64_t hd : {16, 24, 64})  // 16, 64: tensor-core kernels for bf16/f16; 24: FMA
        for (bool causal : {true, false}) {
          CAPTURE(dt);
          CAPTURE(hd);
          CAPTURE(causal);
          const int64_t nh = 3, C = nh * hd;
          const Tensor qkv = random_tensor({2, 77, 3 * C}, kFloat32, 8).to(dt);
          const Tensor gout = random_tensor({2, 77, C}, kFloat32, 9).to(dt);
          const Result s = run(qkv.to(gpu), gout.to(gpu), nh, causal, 0.0, false);
          const Result d = run(qkv.to(gpu), gout.to(gpu), nh, causal, 0.0, true);
          check_same(s, d);  // the same kernels on other strides: the same arithmetic
          const Result cpu = run(qkv, gout, nh, causal, 0.0, false);
          // as tests/test_cuda_attention.cpp's near(): relative, with a floor at the tensor's
          // largest magnitude (half kernels round P and dS to T for the tensor-core products)
          const double tol = dt == kFloat64 ? 1e-10 : dt == kFloat32 ? 2e-5 : 2e-2;
          for (auto [a, b] : std::array<std::pair<Tensor, Tensor>, 4>{
                   {{s.out, cpu.out}, {s.gq, cpu.gq}, {s.gk, cpu.gk}, {s.gv, cpu.gv}}}) {
            const Tensor bf = b.to(kFloat64);
            const double mx = std::max(amax(abs(bf), {}).item<double>(), 0.1);
            check_close(a.contiguous().cpu().to(kFloat64), bf, tol, tol * mx);
          }
        }
  }

  TEST_CASE("cuda_attention_strided: the transformer block matches MINIDL_UNFUSED=qkv_attention") {
    ScopedUnfused restore;
    const Device gpu{DeviceType::cuda, 0};
    const Tensor x = random_tensor({2, 70, 64}, kFloat32, 4).to(gpu);
    const Tensor g = random_tensor({2, 70, 64}, kFloat32, 5).to(gpu);
    auto run_block = [&](const std::string& unfused) {
      variants::set_unfused(unfused);
      Generator gen(7);
      nn::TransformerBlock block(64, 4, 0.0, true, &gen);
      block.to(gpu);
      Tensor xi = x.clone().requires_grad_();
      Tensor y = block.forward(xi);
      y.backward(g);
      std::vector<Tensor> r{y.detach().cpu(), xi.grad().cpu()};
      for (const Tensor& p : block.parameters()) r.push_back(p.grad().cpu());
      return r;
    };
    const std::vector<Tensor> fused = run_block("");
    const std::vector<Tensor> old = run_block("qkv_attention");
    REQUIRE(fused.size() == old.size());
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(allclose(fused[i], old[i], 1e-5, 1e-5));
    }
  }
}
