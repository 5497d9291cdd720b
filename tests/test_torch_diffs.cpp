// Behaviours that differed from PyTorch 1.13, checked on the CPU against its golden values
// (tests/data/golden_torch_diffs.json): clamp's promotion, BCE-with-logits' gradient at 0,
// topk's gradient, and max/min/amax/amin/maximum/minimum gradients with ties and NaN.
#include "autograd/gradcheck.h"
#include "torch_diffs_checks.h"

using namespace minidl;
using namespace testutil;
namespace F = minidl::nn::functional;

TEST_CASE("torch_diffs: clamp of an integer tensor with float bounds promotes to float") {
  Tensor c = clamp(from_f64({1, 2, 3}, {3}, kInt64), 1.5, 2.5);
  CHECK(c.dtype() == kFloat32);
  CHECK(to_f64(c) == std::vector<double>{1.5, 2.0, 2.5});
  Tensor i = clamp(from_f64({1, 2, 3}, {3}, kInt32), 1, 2);  // integer bounds keep the dtype
  CHECK(i.dtype() == kInt32);
  CHECK(to_f64(i) == std::vector<double>{1, 2, 2});
  CHECK_THROWS_WITH_AS(clamp(from_f64({1, 0}, {2}, kBool), false, true),
                       doctest::Contains("op `clamp`: not supported for bool"), Error);
  torch_diffs::check_clamp(kCPU);
}

TEST_CASE("torch_diffs: binary_cross_entropy_with_logits gradient is sigmoid(x) - y, also at 0") {
  Tensor x = from_f64({0, 0, 0}, {3}, kFloat32).requires_grad_();
  Tensor y = from_f64({1, 0, 0.25}, {3}, kFloat32);
  F::binary_cross_entropy_with_logits(x, y, {}, Reduction::sum).backward();
  check_close(x.grad(), {-0.5, 0.5, 0.25}, 0, 1e-7);
  Tensor x2 = from_f64({0, 0}, {2}, kFloat64).requires_grad_();
  Tensor pw = from_f64({3, 2}, {2}, kFloat64);
  F::binary_cross_entropy_with_logits(x2, from_f64({1, 0}, {2}, kFloat64), {}, Reduction::sum, pw)
      .backward();
  check_close(x2.grad(), {0.5 * 3 - 3, 0.5});  // (1 + (pw-1) y) sigmoid(0) - pw y
  GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return F::binary_cross_entropy_with_logits(in[0], in[1], {}, Reduction::sum, pw);
      },
      {from_f64({0, 0.5}, {2}, kFloat64).requires_grad_(), leaf({2}, 3, 0, 1)});
  Tensor w = from_f64({1, 2}, {2}, kFloat64).requires_grad_();
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy_with_logits(x2, x2.detach(), w),
                       doctest::Contains("not differentiable with respect to argument 'weight'"),
                       Error);
  torch_diffs::check_bce(kCPU);
}

TEST_CASE("torch_diffs: topk values scatter their gradient to the chosen indices") {
  torch_diffs::check_topk(kCPU);
  GRADCHECK([](const std::vector<Tensor>& in) { return topk(in[0], 2, 1, false).first; },
            {leaf({3, 4}, 7)});
  Tensor s = from_f64({2.5}, {}, kFloat64).requires_grad_();  // 0-d input
  topk(s, 1).first.backward(from_f64({3}, {}, kFloat64));
  check_close(s.grad(), {3});
  Tensor i = from_f64({3, 1, 2}, {3}, kInt64);  // integer values carry no history
  CHECK_FALSE(topk(i, 2).first.requires_grad());
}

TEST_CASE("torch_diffs: max/min/amax/amin gradients with ties and NaN") {
  Tensor x = from_f64({1, 3, 3}, {3}, kFloat32).requires_grad_();
  max(x).backward();
  check_close(x.grad(), {0, 0.5, 0.5});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor xn = from_f64({1, nan, 3, nan}, {4}, kFloat32).requires_grad_();
  min(xn).backward();  // the NaN result's gradient is shared by the NaN elements
  check_close(xn.grad(), {0, 0.5, 0, 0.5});
  torch_diffs::check_reductions(kCPU);
}

TEST_CASE("torch_diffs: maximum/minimum gradients with ties and NaN") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = from_f64({nan, 2}, {2}, kFloat32).requires_grad_();
  Tensor b = from_f64({1, 2}, {2}, kFloat32).requires_grad_();
  maximum(a, b).backward(from_f64({1, 1}, {2}));
  check_close(a.grad(), {1, 0.5});  // a NaN operand: both operands get the whole gradient
  check_close(b.grad(), {1, 0.5});
  torch_diffs::check_maximum_minimum(kCPU);
}
