// CPU-vs-CUDA parity of the GPT ops (cases_gpt: tril/triu, masked_fill, cumsum and its reverse
// in the backward, div rounding modes, multinomial draws, class-probability cross_entropy, the
// fused classifier loss, add_layer_norm, linear_gelu, matmul_gelu_backward), run on the GPU by the
// cuda_gpt_ops suite and CPU-against-CPU by test_cuda_ops.cpp.
#include "autograd/engine.h"
#include "cuda_parity.h"

using namespace minidl;
using namespace parity;

namespace {
using V = std::vector<Tensor>;

// The gradient of sum(out * w) w.r.t. x for a fixed pseudo-random w (exercises the backward).
Tensor grad_through(const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
  Tensor xl = x.detach().clone().requires_grad_();
  Tensor out = f(xl);
  Tensor w = rnd(out.shape(), out.dtype(), 99, kCPU).to(out.device());
  sum(mul(out, w)).backward();
  return xl.grad();
}
}  // namespace

namespace parity {

std::vector<Case> cases_gpt() {
  std::vector<Case> cs;
  const std::vector<std::vector<Shape>> mats = {{{5, 7}}, {{2, 3, 4, 6}}, {{1, 33, 33}}, {{0, 4}}};
  Case tri{"tril, triu", {"tril", "triu"}, mats, kAll, [](const V& in, Device, int v) {
             const int64_t diag = v - 1;  // -1, 0, 1, 4
             return V{tril(in[0], diag == 2 ? 4 : diag), triu(in[0], diag == 2 ? 4 : diag)};
           }};
  tri.variants = 4;
  tri.exact = true;
  cs.push_back(tri);

  Case mf{
      "masked_fill", {"where"}, {{{4, 6}}, {{2, 3, 8}}}, kAll, [](const V& in, Device dev, int v) {
        const Tensor& x = in[0];
        Tensor m = rnd(Shape(x.shape().end() - 2, x.shape().end()), kBool, 5, kCPU).to(dev);
        if (v == 0) return V{masked_fill(x, m, 1)};
        if (v == 1) return V{masked_fill(x, m, scalar_tensor(0.5, kFloat64, dev))};
        Tensor y = x.clone();
        masked_fill_(y, m, 0);
        return V{y};
      }};
  mf.variants = 3;
  mf.exact = true;
  cs.push_back(mf);

  Case cum{
      "cumsum",
      {"cumsum"},
      {{{7}}, {{5, 9}}, {{3, 4, 130}}, {{0, 3}}, {{}}},
      kAll,
      [](const V& in, Device, int v) {
        const Tensor& x = in[0];
        const int64_t dim = x.dim() == 0 ? 0 : (v % 2 ? -1 : 0);
        V out{cumsum(x, dim)};
        if (v >= 2 && is_floating(x.dtype()) && x.dtype() != kFloat16 && x.dtype() != kBFloat16)
          out.push_back(grad_through(x, [dim](const Tensor& t) { return cumsum(t, dim); }));
        return out;
      }};
  cum.variants = 4;
  cum.exact = true;  // one sequential scan per line on both devices
  cs.push_back(cum);

  Case dv{"div rounding modes",
          {"div_trunc", "div_floor"},
          {{{6, 7}, {6, 7}}, {{4, 1}, {1, 9}}, {{130}, {}}},
          {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64},
          [](const V& in, Device, int v) {
            // nonzero integer divisors: shift the zeros away
            Tensor b = is_floating(in[1].dtype()) ? in[1]
                                                  : where(ne(in[1], 0), in[1], 3).to(in[1].dtype());
            if (v == 0) return V{div(in[0], b, "trunc")};
            if (v == 1) return V{div(in[0], b, "floor")};
            return V{floor_divide(in[0], -3)};
          }};
  dv.variants = 3;
  dv.lo = -9;
  dv.hi = 9;
  cs.push_back(dv);

  Case mn{"multinomial",
          {"multinomial"},
          {{{7}}, {{5, 12}}, {{3, 1000}}},
          {kFloat32, kFloat64},
          [](const V& in, Device, int v) {
            Generator g(11 + uint64_t(v));
            Tensor w = abs(in[0]);
            const int64_t C = w.size(-1);
            Tensor s = v == 0 ? multinomial(w, 9, true, &g)
                              : multinomial(w, std::min<int64_t>(C, 5), false, &g);
            return V{s, scalar_tensor(int64_t(g.offset()), kInt64, s.device())};
          }};
  mn.variants = 2;
  mn.exact = true;
  cs.push_back(mn);

  Case ce{
      "cross_entropy with class-probability targets",
      {"log_softmax"},
      {{{6, 5}, {6, 5}}, {{2, 4, 3, 3}, {2, 4, 3, 3}}},
      {kFloat32, kFloat64},
      [](const V& in, Device, int v) {
        Tensor t = softmax(in[1], 1);
        const Reduction r = v == 0 ? Reduction::mean : v == 1 ? Reduction::sum : Reduction::none;
        Tensor loss = cross_entropy(in[0], t, r, -100, v == 0 ? 0.1 : 0.0);
        return V{loss, grad_through(in[0], [&](const Tensor& x) {
                   return cross_entropy(x, t, r, -100, v == 0 ? 0.1 : 0.0);
                 })};
      }};
  ce.variants = 3;
  ce.layouts = false;
  cs.push_back(ce);

  // The fused attention op and its backward (tests/test_cuda_attention.cpp has the full set:
  // masks, dropout, head dims, fully masked rows); here the table's dtype/layout sweep.
  Case at{
      "scaled_dot_product_attention",
      {"scaled_dot_product_attention", "scaled_dot_product_attention_backward"},
      {{{2, 2, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}}, {{1, 3, 9, 16}, {1, 3, 9, 16}, {1, 3, 9, 16}}},
      kFloats,
      [](const V& in, Device, int v) {
        const bool causal = v == 1;
        const Tensor &q = in[0], &k = in[1], &w = in[2];
        auto att = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
          return scaled_dot_product_attention(a, b, c, {}, 0.0, causal);
        };
        return V{att(q, k, w), grad_through(q, [&](const Tensor& t) { return att(t, k, w); }),
                 grad_through(k, [&](const Tensor& t) { return att(q, t, w); }),
                 grad_through(w, [&](const Tensor& t) { return att(q, k, t); })};
      }};
  at.variants = 2;
  at.layouts = false;
  at.tol_scale = 4;
  cs.push_back(at);

  // The fused classifier loss (tests/test_fused_cross_entropy.cpp has the full set): the loss,
  // the gradient it writes over the logits (3 columns of padding, every 3rd row ignored) and
  // the backward's in-place scale; variant 1: the no-grad form.
  Case fce{"fused_cross_entropy",
           {"fused_cross_entropy", "fused_cross_entropy_backward"},
           {{{6, 13}}, {{5, 16}}, {{4, 1100}}},
           kFloats,
           [](const V& in, Device dev, int v) {
             const int64_t N = in[0].size(0), Vp = in[0].size(1), C = Vp - 3;
             Tensor t = idx({N}, C, 77, kCPU);
             for (int64_t i = 0; i < N; i += 3) t.data_ptr<int64_t>()[i] = -100;
             t = t.to(dev);
             if (v == 1) return V{native::fused_cross_entropy(in[0], t, C)};
             Tensor buf = in[0].clone();
             Tensor loss = native::fused_cross_entropy_(buf, t, C);
             Tensor g = buf.clone();
             native::fused_cross_entropy_backward_(g, full({}, 3.0, kFloat32, dev));
             return V{loss, buf, g};
           }};
  fce.variants = 2;
  fce.layouts = false;
  fce.tol_scale = 2;
  cs.push_back(fce);

  // autocast's batched weight copies: every tensor of a list to bf16, f16 and f32 in one
  // foreach_copy_ (sizes across the multi-tensor chunk of 65536 elements, and empty ones).
  Case fc{"foreach_copy_",
          {"foreach_copy"},
          {{{3, 5}, {7}, {0}}, {{70001}, {131073}, {2, 3}}},
          kFloats,
          [](const V& in, Device, int v) {
            const DType to = v == 0 ? kBFloat16 : v == 1 ? kFloat16 : kFloat32;
            V dst;
            for (const Tensor& t : in) dst.push_back(empty(t.shape(), to, t.device()));
            native::foreach_copy_(dst, in);
            return dst;
          }};
  fc.variants = 3;
  fc.layouts = false;
  fc.exact = true;
  cs.push_back(fc);

  // GELU's one-kernel gradients (exact and tanh).
  Case gb{"gelu backward",
          {"gelu_backward", "gelu_tanh_backward"},
          {{{7, 33}}, {{2, 3, 130}}},
          kFloats,
          [](const V& in, Device, int v) {
            const char* approx = v == 0 ? "none" : "tanh";
            return V{grad_through(in[0], [&](const Tensor& t) { return gelu(t, approx); })};
          }};
  gb.variants = 2;
  gb.lo = -4, gb.hi = 4;
  cs.push_back(gb);

  // add_layer_norm (residual add + LayerNorm): the register-row kernels (D % vector == 0 up to
  // 1024), the warp and block fallbacks (D = 7, 1030); 16-bit residuals and outs beside f32
  // rows, and bf16 rows beside f32 weights (gpt --residual-dtype bf16); values, statistics and
  // the gradients of x, y, w, b for both outputs' gradients.
  Case aln{"add_layer_norm",
           {"add_layer_norm", "add_layer_norm_backward"},
           {{{4, 7}, {4, 7}, {7}, {7}},
            {{6, 768}, {6, 768}, {768}, {768}},
            {{3, 1030}, {3, 1030}, {1030}, {1030}},
            {{0, 16}, {0, 16}, {16}, {16}}},
           kFloats,
           [](const V& in, Device dev, int v) {
             const DType dt = in[0].dtype();
             if (v > 0 && dt != kFloat32) return V{};
             // v: 0 all dt; 1 bf16 residual and out; 2 f16 residual, f32 out; 3 no residual;
             // 4 the bf16 residual stream (x, y, sum, out bf16 beside f32 w and b)
             const DType xd = v == 4 ? kBFloat16 : dt;
             const DType yd = v == 1 || v == 4 ? kBFloat16 : v == 2 ? kFloat16 : dt;
             const DType od = v == 1 || v == 3 || v == 4 ? kBFloat16 : dt;
             const int64_t D = in[0].size(-1);
             Tensor x = in[0].detach().to(xd).clone().requires_grad_();
             Tensor y = v == 3 ? Tensor() : in[1].detach().to(yd).requires_grad_();
             Tensor w = in[2].detach().clone().requires_grad_();
             Tensor b = in[3].detach().clone().requires_grad_();
             AddLayerNormResult r = add_layer_norm(x, y, {D}, w, b, 1e-5, od);
             const Tensor go = rnd(r.out.shape(), od, 31, kCPU).to(dev);
             const Tensor gs = rnd(r.sum.shape(), xd, 32, kCPU).to(dev);
             V roots{r.out}, grads{go}, inputs{x, w, b};
             if (y.defined()) roots.push_back(r.sum), grads.push_back(gs), inputs.push_back(y);
             V out{r.sum.detach(), r.out.detach(), r.rstd};
             for (const Tensor& g : autograd::grad(roots, inputs, grads)) out.push_back(g);
             return out;
           }};
  aln.variants = 5;
  aln.tol_scale = 4;
  cs.push_back(aln);

  // linear_gelu (c_fc + GELU): cuBLASLt's GELU_AUX_BIAS epilogue where N % 8 == 0 (24), the bias
  // GEMM then the gelu_tanh kernel otherwise (9); out, the GELU's input, and the gradients.
  Case lg{"linear_gelu",
          {"linear_gelu"},
          {{{4, 8}, {24, 8}, {24}}, {{2, 3, 16}, {24, 16}, {24}}, {{5, 7}, {9, 7}, {9}}},
          kFloats,
          [](const V& in, Device dev, int v) {
            if (v == 0) {
              auto [out, pre] = native::linear_gelu(in[0], in[1], in[2]);
              return V{out, pre};
            }
            Tensor x = in[0].detach().clone().requires_grad_();
            Tensor w = in[1].detach().clone().requires_grad_();
            Tensor b = in[2].detach().clone().requires_grad_();
            Tensor out = linear_gelu(x, w, b);
            sum(mul(out, rnd(out.shape(), out.dtype(), 33, kCPU).to(dev))).backward();
            return V{x.grad(), w.grad(), b.grad()};
          }};
  lg.variants = 2;
  lg.lo = -1, lg.hi = 1;
  lg.tol_scale = 4;
  cs.push_back(lg);

  // matmul_gelu_backward (c_proj's input gradient times the GELU's derivative): cuBLASLt's DGELU
  // epilogue where K % 8 == 0 (24), the GEMM then the gelu_tanh_backward kernel otherwise (9);
  // then linear_gelu_linear's gradients (x = in[0], c_fc = in[1]^T with a row of in[2] as its
  // bias, c_proj = in[1] with a row of in[0] as its bias).
  Case mg{
      "matmul_gelu_backward",
      {"matmul_gelu_backward"},
      {{{4, 8}, {8, 24}, {4, 24}}, {{2, 3, 16}, {16, 24}, {2, 3, 24}}, {{5, 7}, {7, 9}, {5, 9}}},
      kFloats,
      [](const V& in, Device, int v) {
        if (v == 0) return V{native::matmul_gelu_backward(in[0], in[1], in[2])};
        const int64_t N = in[1].size(0), K = in[1].size(1);
        Tensor x = in[0].detach().clone().requires_grad_();
        Tensor w1 = in[1].t().contiguous().requires_grad_();
        Tensor b1 = in[2].reshape({-1, K}).select(0, 0).contiguous().requires_grad_();
        Tensor w2 = in[1].detach().clone().requires_grad_();
        Tensor b2 = in[0].reshape({-1, N}).select(0, 0).contiguous().requires_grad_();
        Tensor out = linear_gelu_linear(x, w1, b1, w2, b2);
        sum(mul(out, out.detach())).backward();
        return V{x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()};
      }};
  mg.variants = 2;
  mg.lo = -1, mg.hi = 1;
  mg.tol_scale = 4;
  cs.push_back(mg);
  return cs;
}

}  // namespace parity

TEST_SUITE("cuda_gpt_ops") {
  TEST_CASE("cuda parity: tril/triu, masked_fill, cumsum, rounded div, multinomial, soft CE") {
    parity::run_all(parity::cases_gpt());
  }
  TEST_CASE("cuda multinomial: same draws as the CPU for the same seed, large rows") {
    Tensor w = rnd({4, 50000}, kFloat32, 3, kCPU, 0, 1);
    Generator gc(5), gg(5);
    Tensor a = multinomial(w, 16, true, &gc), b = multinomial(w.cuda(), 16, true, &gg);
    CHECK(equal(a, b.cpu()));
    Tensor c = multinomial(w, 8, false, &gc), d = multinomial(w.cuda(), 8, false, &gg);
    CHECK(equal(c, d.cpu()));
    CHECK(gc.offset() == gg.offset());
    CHECK_THROWS_WITH_AS(multinomial(zeros({2, 3}, kFloat32, kCUDA), 1),
                         doctest::Contains("sum of probabilities"), Error);
  }
  TEST_CASE("cuda div with rounding_mode: integer division by zero throws") {
    Tensor a = arange(6).cuda(), z = zeros({6}, kInt64, kCUDA);
    CHECK_THROWS_WITH_AS(div(a, z, "trunc"), doctest::Contains("ZeroDivisionError"), Error);
  }
}
