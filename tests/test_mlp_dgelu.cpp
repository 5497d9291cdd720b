// linear_gelu_linear (an MLP's c_fc, tanh GELU and c_proj, the GELU's backward inside c_proj's
// input-gradient GEMM, issue 40) and its op matmul_gelu_backward: f64 gradcheck; on the CPU
// bitwise the values and gradients of the three calls (f32, bf16, f64; plain and under bf16
// autocast with f32 parameters); one backward dispatch fewer; the fallbacks
// (MINIDL_UNFUSED=mlp_dgelu, no c_proj bias, mixed dtypes, a hooked c_proj); errors.
#include <doctest/doctest.h>

#include "autograd/autocast.h"
#include "nn/transformer.h"
#include "tensor/profiler.h"
#include "tensor/variants.h"
#include "mlp_fusion_check.h"
#include "test_util.h"

using namespace minidl;
using namespace testutil;

namespace {

struct Mlp {
  Tensor x, w1, b1, w2, b2;
};

// x:[*, K] w1:[H,K] b1:[H] w2:[N,H] b2:[N] leaves (b2 undefined when !bias2).
Mlp leaves(DType dt, const Shape& xs, int64_t H, int64_t N, bool bias2 = true) {
  const int64_t K = xs.back();
  Mlp m;
  m.x = random_tensor(xs, dt, 1).requires_grad_();
  m.w1 = random_tensor({H, K}, dt, 2, -0.5, 0.5).requires_grad_();
  m.b1 = random_tensor({H}, dt, 3).requires_grad_();
  m.w2 = random_tensor({N, H}, dt, 4, -0.5, 0.5).requires_grad_();
  if (bias2) m.b2 = random_tensor({N}, dt, 5).requires_grad_();
  return m;
}

// out and the gradients of x, w1, b1, w2, b2 for sum(out * c); fused: linear_gelu_linear, else
// the three calls; backward_dispatches: the backward's dispatch count.
std::vector<Tensor> run(bool fused, DType dt, bool autocast, const Shape& xs, int64_t H, int64_t N,
                        int64_t* backward_dispatches = nullptr) {
  Mlp m = leaves(autocast ? kFloat32 : dt, xs, H, N);
  Tensor out;
  {
    amp::autocast ac(DeviceType::cpu, kBFloat16, autocast);
    out = fused ? linear_gelu_linear(m.x, m.w1, m.b1, m.w2, m.b2)
                : linear(gelu(linear(m.x, m.w1, m.b1), "tanh"), m.w2, m.b2);
  }
  const Tensor c = random_tensor(out.shape(), out.dtype(), 6);
  const Tensor loss = sum(mul(out, c).to(kFloat32));
  const int64_t n = dispatches_of([&] { loss.backward(); });
  if (backward_dispatches) *backward_dispatches = n;
  return {out.detach(), m.x.grad(), m.w1.grad(), m.b1.grad(), m.w2.grad(), m.b2.grad()};
}

}  // namespace

TEST_CASE("matmul_gelu_backward: bitwise gelu_backward(matmul(g, w), pre, \"tanh\")") {
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    CAPTURE(dt);
    const Tensor g = random_tensor({2, 3, 8}, dt, 1), w = random_tensor({8, 24}, dt, 2);
    const Tensor pre = random_tensor({2, 3, 24}, dt, 3);
    const Tensor got = native::matmul_gelu_backward(g, w, pre);
    CHECK(got.shape() == pre.shape());
    CHECK(bitwise_equal(got, native::gelu_backward(native::matmul(g, w), pre, "tanh")));
  }
  // no rows
  const Tensor e = native::matmul_gelu_backward(zeros({0, 8}), zeros({8, 16}), zeros({0, 16}));
  CHECK(e.shape() == Shape{0, 16});
}

TEST_CASE("matmul_gelu_backward: errors name the shapes and dtypes") {
  const Tensor g = random_tensor({4, 8}, kFloat32, 1), w = random_tensor({8, 16}, kFloat32, 2);
  CHECK_THROWS_WITH_AS(native::matmul_gelu_backward(g, w, random_tensor({4, 15}, kFloat32, 3)),
                       doctest::Contains("expected g:[*, N], w:[N, K], pre:[*, K]"), Error);
  CHECK_THROWS_WITH_AS(native::matmul_gelu_backward(g, w, random_tensor({5, 16}, kFloat32, 3)),
                       doctest::Contains("pre [5, 16]"), Error);
  CHECK_THROWS_WITH_AS(native::matmul_gelu_backward(g, w, random_tensor({4, 16}, kFloat64, 3)),
                       doctest::Contains("same dtype"), Error);
  CHECK_THROWS_WITH_AS(native::matmul_gelu_backward(random_tensor({4, 8}, kInt64, 1),
                                                    random_tensor({8, 16}, kInt64, 2),
                                                    random_tensor({4, 16}, kInt64, 3)),
                       doctest::Contains("expected a floating dtype"), Error);
}

TEST_CASE("linear_gelu_linear: gradcheck in f64") {
  const Mlp m = leaves(kFloat64, {2, 3, 5}, 8, 4);
  GRADCHECK(
      [](const std::vector<Tensor>& t) { return linear_gelu_linear(t[0], t[1], t[2], t[3], t[4]); },
      {m.x, m.w1, m.b1, m.w2, m.b2});
  const Mlp n = leaves(kFloat64, {3, 5}, 8, 4, false);  // 2-D x, no c_proj bias
  GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return linear_gelu_linear(t[0], t[1], t[2], t[3], Tensor());
      },
      {n.x, n.w1, n.b1, n.w2});
}

TEST_CASE("linear_gelu_linear: bitwise the three calls, values and gradients, one dispatch less") {
  amp::clear_autocast_cache();
  for (DType dt : {kFloat32, kBFloat16, kFloat64})
    for (bool autocast : {false, true}) {
      if (autocast && dt != kBFloat16) continue;
      for (const Shape& xs : {Shape{3, 8}, Shape{2, 5, 16}}) {
        CAPTURE(dt);
        CAPTURE(autocast);
        int64_t nf = 0, nu = 0;
        const std::vector<Tensor> f = run(true, dt, autocast, xs, 24, 16, &nf);
        amp::clear_autocast_cache();
        const std::vector<Tensor> u = run(false, dt, autocast, xs, 24, 16, &nu);
        amp::clear_autocast_cache();
        CHECK(nf == nu - 1);  // the GELU's backward is inside c_proj's input-gradient op
        for (size_t i = 0; i < f.size(); ++i) {
          CAPTURE(i);
          CHECK(bitwise_equal(f[i], u[i]));
        }
      }
    }
}

TEST_CASE("linear_gelu_linear: fallbacks give the three calls' values and graph") {
  const Mlp m = leaves(kFloat32, {4, 8}, 16, 8);
  const Tensor ref = linear(gelu(linear(m.x, m.w1, m.b1), "tanh"), m.w2, m.b2);
  {
    ScopedUnfused off("mlp_dgelu");
    const Tensor y = linear_gelu_linear(m.x, m.w1, m.b1, m.w2, m.b2);
    CHECK(bitwise_equal(y, ref));
    CHECK(y.grad_fn()->name() == std::string("LinearBackward"));
  }
  {
    const Tensor y = linear_gelu_linear(m.x, m.w1, m.b1, m.w2, m.b2);
    CHECK(y.grad_fn()->name() == std::string("GeluLinearBackward"));
  }
  // c_proj's weight in another dtype: the GELU node, then linear's own dtype error
  const Tensor w2d = random_tensor({8, 16}, kFloat64, 4);
  CHECK_THROWS_WITH_AS(linear_gelu_linear(m.x, m.w1, m.b1, w2d, Tensor()),
                       doctest::Contains("same dtype"), Error);
  // c_fc without a bias: linear_gelu's two calls, c_proj's own node
  const Tensor y = linear_gelu_linear(m.x, m.w1, Tensor(), m.w2, m.b2);
  CHECK(bitwise_equal(y, linear(gelu(linear(m.x, m.w1), "tanh"), m.w2, m.b2)));
  CHECK(y.grad_fn()->name() == std::string("LinearBackward"));
}

TEST_CASE("MLP: the fused backward is bitwise the unfused one, and a hooked c_proj runs its call") {
  manual_seed(5);
  nn::MLP mlp(16);
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    check_mlp_fusion(mlp, "mlp_dgelu", *mlp.c_proj, bf16, CountedPass::backward);
  }
}
