// linear_gelu (an MLP's c_fc and its tanh GELU in one dispatch, issue 40): f64 gradcheck; on the
// CPU bitwise the values and gradients of gelu(linear(x, w, b), "tanh") in f32 and bf16, plain and
// under bf16 autocast with f32 parameters; one dispatch instead of two; the fallbacks (no bias,
// MINIDL_UNFUSED=linear_gelu, a hooked c_fc); errors. nn::MLP: fused = unfused bitwise.
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

// out and the gradients of x, w, b for sum(out * c); fused: linear_gelu, else the two calls.
std::vector<Tensor> run(bool fused, DType dt, bool autocast, const Shape& xs, int64_t N) {
  const int64_t K = xs.back();
  const DType pd = autocast ? kFloat32 : dt;
  Tensor x = random_tensor(xs, pd, 1).requires_grad_();
  Tensor w = random_tensor({N, K}, pd, 2, -0.5, 0.5).requires_grad_();
  Tensor b = random_tensor({N}, pd, 3).requires_grad_();
  Tensor out;
  {
    amp::autocast ac(DeviceType::cpu, kBFloat16, autocast);
    out = fused ? linear_gelu(x, w, b) : gelu(linear(x, w, b), "tanh");
  }
  Shape os = xs;
  os.back() = N;
  const Tensor c = random_tensor(os, out.dtype(), 4);
  sum(mul(out, c).to(kFloat32)).backward();
  return {out.detach(), x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("linear_gelu: gradcheck in f64") {
  const Tensor x = leaf({2, 3, 5}, 11), w = leaf({4, 5}, 12), b = leaf({4}, 13);
  GRADCHECK([](const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1], t[2]); }, {x, w, b});
  GRADCHECK([](const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1], t[2]); },
            {leaf({3, 5}, 14), w, b});
}

TEST_CASE("linear_gelu: bitwise gelu(linear(x, w, b), \"tanh\"), values and gradients") {
  amp::clear_autocast_cache();
  for (DType dt : {kFloat32, kBFloat16, kFloat64})
    for (bool autocast : {false, true}) {
      if (autocast && dt != kBFloat16) continue;
      for (const Shape& xs : {Shape{3, 8}, Shape{2, 5, 16}}) {
        CAPTURE(dt);
        CAPTURE(autocast);
        const std::vector<Tensor> f = run(true, dt, autocast, xs, 24);
        amp::clear_autocast_cache();
        const std::vector<Tensor> u = run(false, dt, autocast, xs, 24);
        amp::clear_autocast_cache();
        for (size_t i = 0; i < f.size(); ++i) {
          CAPTURE(i);
          CHECK(bitwise_equal(f[i], u[i]));
        }
      }
    }
}

TEST_CASE("linear_gelu: one dispatch forward, and its fallbacks") {
  const Tensor x = random_tensor({4, 8}, kFloat32, 1), w = random_tensor({16, 8}, kFloat32, 2);
  const Tensor b = random_tensor({16}, kFloat32, 3);
  CHECK(dispatches_of([&] { linear_gelu(x, w, b); }) == 1);
  CHECK(dispatches_of([&] { gelu(linear(x, w, b), "tanh"); }) == 2);
  // no bias: the two calls
  CHECK(bitwise_equal(linear_gelu(x, w, Tensor()), gelu(linear(x, w), "tanh")));
  {
    ScopedUnfused off("linear_gelu");
    CHECK(dispatches_of([&] { linear_gelu(x, w, b); }) == 2);
  }
  // 1-D input: the two calls
  CHECK(
      bitwise_equal(linear_gelu(x.select(0, 0), w, b), gelu(linear(x.select(0, 0), w, b), "tanh")));
}

TEST_CASE("linear_gelu: errors name the shapes and dtypes") {
  const Tensor x = random_tensor({4, 8}, kFloat32, 1), w = random_tensor({16, 8}, kFloat32, 2);
  CHECK_THROWS_WITH_AS(native::linear_gelu(x, w, Tensor()), doctest::Contains("needs a bias"),
                       Error);
  CHECK_THROWS_WITH_AS(
      native::linear_gelu(x, random_tensor({16, 7}, kFloat32, 2), random_tensor({16}, kFloat32, 3)),
      doctest::Contains("expected x:[*, K] (at least 2-D), w:[N, K], b:[N]"), Error);
  CHECK_THROWS_WITH_AS(native::linear_gelu(x, w, random_tensor({16}, kFloat64, 3)),
                       doctest::Contains("same dtype"), Error);
  // the frontend with a shape error: linear's own message
  CHECK_THROWS_WITH_AS(linear_gelu(x, random_tensor({16, 7}, kFloat32, 2), Tensor()),
                       doctest::Contains("cannot be multiplied"), Error);
}

TEST_CASE("MLP: c_fc + GELU fused is bitwise the unfused MLP, one dispatch fewer forward") {
  manual_seed(4);
  nn::MLP mlp(16);
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    check_mlp_fusion(mlp, "linear_gelu", *mlp.c_fc, bf16, CountedPass::forward);
  }
}
